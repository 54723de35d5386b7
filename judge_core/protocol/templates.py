"""The judge prompts and the parsers of judge answers: the one place that defines them.

Training data (data_prep), GRPO rewards, the generative judge server and evaluation all import from
here, so a judge is prompted at serving time exactly as it was during training.

Answer formats:
  pointwise  <think>reasoning</think><score>N</score>    N an integer in 0..4
  pairwise   <think>reasoning</think><better>A</better>  A or B; also tie where the prompt offers it

Parsing is strict on purpose (a GRPO policy learns to exploit any leniency): the answer tag is looked
for only after the last ``</think>``, exactly one answer tag (one opening, one closing) must be there,
and its content, less surrounding ASCII whitespace, must be a valid value written in ASCII: a score is
one of the digits 0..4 (no sign, no leading zero, no other script's digits), a verdict the capital
letter A or B, or the word tie where the parser is told that a tie is a verdict. A ``<think>`` left open
after the last ``</think>`` is a failure too. Anything else is a format failure with a reason, never a
guessed prediction.

The reasoning counts (``has_think``) only as one well-formed block: the answer starts, after
whitespace, with ``<think>`` and the reasoning holds no other think tag up to its ``</think>``. A bare
``</think>`` still ends the reasoning part, so the answer after it is parsed, but earns no such credit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from . import content

Message = dict  # {"role": str, "content": str, or a list of content parts (content.py)}
Conversation = str | Sequence[Message]

MIN_SCORE = 0
MAX_SCORE = 4
PAIRWISE_CHOICES = ("A", "B")
PAIRWISE_TIE = "tie"
PAIRWISE_VERDICTS = (*PAIRWISE_CHOICES, PAIRWISE_TIE)  # of a judge whose prompt offers the tie
POINTWISE_TAG = "score"
PAIRWISE_TAG = "better"
POINTWISE_VALUES = tuple(str(score) for score in range(MIN_SCORE, MAX_SCORE + 1))  # the answer texts of the scores

_ROLE_NAMES = {"system": "System", "user": "User", "assistant": "Assistant"}

POINTWISE_INSTRUCTIONS = (
    "You are an impartial judge. Rate how helpful the final assistant response is for the user, "
    f"on an integer scale from {MIN_SCORE} (not helpful at all) to {MAX_SCORE} (extremely helpful). "
    "Judge correctness first, then completeness and clarity; length alone is not a merit."
)
POINTWISE_ANSWER_FORMAT = (
    "First reason step by step inside <think></think>, then give the rating as "
    f"<score>N</score> with N between {MIN_SCORE} and {MAX_SCORE}."
)
REFERENCE_HEADING = "## Reference answer\n"  # a pointwise prompt's reference answer, after the response
PAIRWISE_INSTRUCTIONS = (
    "You are an impartial judge. Two candidate responses answer the same conversation. "
    "Decide which one is more helpful for the user. Judge correctness first, then completeness and "
    "clarity; neither the order of the responses nor their length is a merit."
)
_RESPONSE_A_HEADING, _RESPONSE_B_HEADING = "## Response A\n", "## Response B\n"
PAIRWISE_ANSWER_FORMAT = (
    "First reason step by step inside <think></think>, then name the better response as "
    "<better>A</better> or <better>B</better>."
)
PAIRWISE_TIE_ANSWER_FORMAT = (
    "First reason step by step inside <think></think>, then name the better response as "
    "<better>A</better> or <better>B</better>, or write <better>tie</better> when neither is better."
)


def as_messages(prompt: Conversation) -> list[Message]:
    """A prompt given as plain text or as a message list, as a message list (content parts checked)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    messages = [dict(m) for m in prompt]
    for i, message in enumerate(messages):
        text = message.get("content")
        if message.get("role") not in _ROLE_NAMES or not isinstance(text, str | list):
            raise ValueError(
                f"message {i} needs a role in {sorted(_ROLE_NAMES)} and a content, text or parts: {message!r}"
            )
        if content.is_parts(text):
            content.check_parts(text, f"message {i} content")
    return messages


def conversation_messages(prompt: Conversation, completion: str) -> list[Message]:
    """The conversation a scalar judge scores: the prompt's turns followed by the completion."""
    return as_messages(prompt) + [{"role": "assistant", "content": completion}]


def conversation_token_ids(tokenizer, conversations: Sequence[Sequence[Message]]) -> list[list[int]]:
    """Token ids of conversations as a scalar judge reads them, in training and in serving alike: the chat
    template's text, tokenized without added special tokens (the template holds them). `tokenizer` is a
    Hugging Face tokenizer, passed in so that this module needs nothing beyond the standard library."""
    texts = [tokenizer.apply_chat_template(list(messages), tokenize=False) for messages in conversations]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def render_transcript(messages: Sequence[Message]) -> str:
    """Messages as a readable transcript embedded in a judge prompt. A judge that reads text only is never given
    an image: ValueError naming it (the server refuses such a request, or drops its images, before)."""
    for where, _ in content.image_urls(messages):
        raise ValueError(f"message{where} is an image, and this judge reads text only")
    return "\n\n".join(f"[{_ROLE_NAMES[m['role']]}]\n{content.text_of(m['content'])}" for m in messages)


def shows_reference(messages: Sequence[Message]) -> bool:
    """Whether a pointwise judge prompt (a user message of `messages`) shows a reference answer."""
    return any(f"\n\n{REFERENCE_HEADING}" in m["content"] for m in messages if m["role"] == "user")


def pointwise_messages(prompt: Conversation, response: str, reference: str | None = None) -> list[Message]:
    """Chat messages that ask a generative judge to rate `response` to `prompt` on 0..4."""
    parts = [
        POINTWISE_INSTRUCTIONS,
        "## Conversation\n" + render_transcript(as_messages(prompt)),
        "## Response to rate\n" + response,
    ]
    if reference is not None:
        parts.append(REFERENCE_HEADING + reference)
    parts.append(POINTWISE_ANSWER_FORMAT)
    return [{"role": "user", "content": "\n\n".join(parts)}]


def pairwise_messages(prompt: Conversation, response_a: str, response_b: str, ties: bool = False) -> list[Message]:
    """Chat messages that ask a generative judge which of two responses is better; with `ties`, the answer
    format also offers the verdict tie."""
    parts = [
        PAIRWISE_INSTRUCTIONS,
        "## Conversation\n" + render_transcript(as_messages(prompt)),
        _RESPONSE_A_HEADING + response_a,
        _RESPONSE_B_HEADING + response_b,
        PAIRWISE_TIE_ANSWER_FORMAT if ties else PAIRWISE_ANSWER_FORMAT,
    ]
    return [{"role": "user", "content": "\n\n".join(parts)}]


def offers_tie(text: str) -> bool:
    """Whether a text that holds a pairwise judge prompt (a message content, or the prompt as a chat template
    renders it) offers the verdict tie."""
    return f"\n\n{PAIRWISE_TIE_ANSWER_FORMAT}" in text


def prompt_offers_tie(messages: Sequence[Message]) -> bool:
    """Whether a pairwise judge prompt (a user message of `messages`) offers the verdict tie."""
    return any(offers_tie(m["content"]) for m in messages if m["role"] == "user")


def pairwise_verdicts(ties: bool) -> tuple[str, ...]:
    """The verdicts of a pairwise judge whose prompt offers the tie (`ties`) or does not."""
    return PAIRWISE_VERDICTS if ties else PAIRWISE_CHOICES


def verdict_in_other_order(verdict: str) -> str:
    """The verdict that names the same response, or the tie, with the two responses swapped."""
    return {"A": "B", "B": "A"}.get(verdict, verdict)


def split_pairwise_prompt(text: str) -> tuple[str, str, str] | None:
    """What comes before response A, response A and response B in a text that holds one pairwise judge prompt
    (its message content, or the prompt as a chat template renders it). None when the text holds none, or holds
    a heading or the answer format more than once: a quoted one would make the split ambiguous."""
    answer_format = PAIRWISE_TIE_ANSWER_FORMAT if offers_tie(text) else PAIRWISE_ANSWER_FORMAT
    markers = ["\n\n" + part for part in (_RESPONSE_A_HEADING, _RESPONSE_B_HEADING, answer_format)]
    if any(text.count(marker) != 1 for marker in markers):
        return None
    a_start, b_start, end = (text.index(marker) for marker in markers)
    if not a_start < b_start < end:
        return None
    return text[:a_start], text[a_start + len(markers[0]) : b_start], text[b_start + len(markers[1]) : end]


@dataclass(frozen=True)
class Judgement:
    """A parsed judge answer: `value` when the format is right, else `error` says why not. `reasoning` is
    the content of a well-formed think block (`has_think`), else None."""

    value: int | str | None
    error: str | None = None
    reasoning: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def has_think(self) -> bool:
        return self.reasoning is not None


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_ASCII_WHITESPACE = " \t\n\r\x0b\x0c"
_PLAIN_INTEGER = re.compile(r"0|[1-9][0-9]*")  # explicit [0-9]: \d would take any script's digits


def _split_reasoning(text: str) -> tuple[str | None, str | None, str | None]:
    """(reasoning of a well-formed think block or None, the answer after the last </think>, error)."""
    if not isinstance(text, str):
        return None, None, f"answer is {type(text).__name__}, not text"
    reasoning_part, closed, answer = text.rpartition(_THINK_CLOSE)  # ("", "", text) without a </think>
    if _THINK_OPEN in answer:
        return None, None, f"{_THINK_OPEN} is never closed"
    return _well_formed_reasoning(reasoning_part) if closed else None, answer, None


def _well_formed_reasoning(reasoning_part: str) -> str | None:
    """The content of `<think>content` (what precedes the last </think>), if that is all there is."""
    block = reasoning_part.lstrip(_ASCII_WHITESPACE)
    if not block.startswith(_THINK_OPEN):
        return None
    content = block[len(_THINK_OPEN) :]
    if _THINK_OPEN in content or _THINK_CLOSE in content:
        return None
    return content.strip(_ASCII_WHITESPACE)


def _single_tag(answer: str, tag: str) -> tuple[str | None, str | None]:
    """The content, less surrounding ASCII whitespace, of the one <tag>..</tag> in `answer`, or an error."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    openings, closings = answer.count(opening), answer.count(closing)
    if openings == closings == 0:
        return None, f"no {opening}...{closing} after the reasoning"
    if openings != 1 or closings != 1:
        return None, f"{openings} {opening} and {closings} {closing} tags, expected exactly one {opening}...{closing}"
    start, end = answer.find(opening), answer.find(closing)
    if end < start:
        return None, f"{closing} before {opening}"
    return answer[start + len(opening) : end].strip(_ASCII_WHITESPACE), None


def _parse(text: str, tag: str, read_value) -> Judgement:
    """`read_value(content)` of the one <tag> after the reasoning: (value, None) or (None, error)."""
    value = None
    reasoning, answer, error = _split_reasoning(text)
    if error is None:
        content, error = _single_tag(answer, tag)
    if error is None:
        value, error = read_value(content)
    return Judgement(value, error, reasoning)


def _score_value(content: str) -> tuple[int | None, str | None]:
    if not _PLAIN_INTEGER.fullmatch(content):
        return None, f"score {content[:40]!r} is not a plain integer (ASCII digits, no sign, no leading zero)"
    # The length check first: int() of a huge digit string is slow, and refused beyond 4300 digits.
    if len(content) > len(str(MAX_SCORE)) or not MIN_SCORE <= int(content) <= MAX_SCORE:
        return None, f"score {content[:40]} outside {MIN_SCORE}..{MAX_SCORE}"
    return int(content), None


def _better_value(verdicts: Sequence[str]):
    def read(content: str) -> tuple[str | None, str | None]:
        if content not in verdicts:
            return None, f"better {content[:40]!r} is not one of {tuple(verdicts)}"
        return content, None

    return read


def parse_pointwise(text: str) -> Judgement:
    """Parse `<think>..</think><score>N</score>`; N must be one of the ASCII digits MIN_SCORE..MAX_SCORE."""
    return _parse(text, POINTWISE_TAG, _score_value)


def parse_pairwise(text: str, verdicts: Sequence[str] = PAIRWISE_CHOICES) -> Judgement:
    """Parse `<think>..</think><better>A|B</better>`: the ASCII capital A or B, or another of `verdicts`
    (PAIRWISE_VERDICTS: also tie)."""
    return _parse(text, PAIRWISE_TAG, _better_value(verdicts))


def answer_value_offset(text: str, tag: str) -> int:
    """Where in `text`, an answer that parses (parse_pointwise / parse_pairwise), the value of its one <tag>
    after the last </think> starts: the first character of the tag's content less its leading whitespace."""
    reasoning_end = text.rfind(_THINK_CLOSE)
    answer_start = 0 if reasoning_end < 0 else reasoning_end + len(_THINK_CLOSE)
    opening = f"<{tag}>"
    tag_start = text.find(opening, answer_start)
    if tag_start < 0:
        raise ValueError(f"no {opening} after the reasoning: parse the answer before locating its value")
    content_start = tag_start + len(opening)
    content = text[content_start:]
    return content_start + len(content) - len(content.lstrip(_ASCII_WHITESPACE))


def normalized_score(score: int) -> float:
    """A pointwise score on MIN_SCORE..MAX_SCORE mapped to [0, 1]."""
    return (score - MIN_SCORE) / (MAX_SCORE - MIN_SCORE)


def pointwise_ground_truth(score: int, answer: str | None = None) -> str:
    """The `reward_model.ground_truth` of a pointwise GRPO row: one JSON string type for every row. `answer`: the
    correct answer to the rated conversation's question, for a reward that checks the judge's recall of it
    (`recalled_answer`); absent where the data has no single correct answer."""
    if isinstance(score, bool) or not (isinstance(score, int) and MIN_SCORE <= score <= MAX_SCORE):
        raise ValueError(f"pointwise label {score!r} is not an integer in {MIN_SCORE}..{MAX_SCORE}")
    if answer is None:
        return json.dumps({"score": score})
    if not (isinstance(answer, str) and answer.strip()):
        raise ValueError(f"pointwise correct answer {answer!r} is not a non-empty string")
    return json.dumps({"score": score, "answer": answer}, ensure_ascii=False)


def pairwise_ground_truth(better: str) -> str:
    """The `reward_model.ground_truth` of a pairwise GRPO row: A, B or tie."""
    if better not in PAIRWISE_VERDICTS:
        raise ValueError(f"pairwise label {better!r} is not one of {PAIRWISE_VERDICTS}")
    return json.dumps({"better": better})


def read_ground_truth(ground_truth: str) -> dict:
    """Decode a ground truth written by pointwise_ground_truth or pairwise_ground_truth."""
    try:
        label = json.loads(ground_truth)
    except (TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"ground truth {ground_truth!r} is not JSON") from err
    if isinstance(label, dict) and set(label) in ({"score"}, {"score", "answer"}):
        pointwise_ground_truth(label["score"], label.get("answer"))
    elif isinstance(label, dict) and set(label) == {"better"}:
        pairwise_ground_truth(label["better"])
    else:
        raise ValueError(
            f'ground truth {ground_truth!r} is neither {{"score": N}} (with an optional "answer") '
            f'nor {{"better": "A"|"B"}}'
        )
    return label


RECALLED_ANSWER_OPENING = "The correct answer is"  # how a reasoning that recalls the answer first states it
_RECALLED_ANSWER = re.compile(re.escape(RECALLED_ANSWER_OPENING) + " ", re.IGNORECASE)


def recalled_answer(reasoning: str) -> str | None:
    """The value a reasoning recalls as the correct answer, as `data_prep offline --pointwise-answer-first` writes
    it: after the first "the correct answer is" (any case, so that the working may come first: "3 + 19 = 22, so
    the correct answer is 22; it answers ..."), up to the next ";" or the end, less a final period. None where
    the reasoning states no correct answer."""
    opening = _RECALLED_ANSWER.search(reasoning)
    if opening is None:
        return None
    value = reasoning[opening.end() :].split(";", 1)[0].strip(_ASCII_WHITESPACE).removesuffix(".")
    return value or None


def same_answer(recalled: str, answer: str) -> bool:
    """Whether a recalled value is the correct answer: equal less case and surrounding whitespace."""
    return recalled.strip(_ASCII_WHITESPACE).casefold() == answer.strip(_ASCII_WHITESPACE).casefold()
