"""The judge prompts and the parsers of judge answers: the one place that defines them.

Training data (data_prep), GRPO rewards, the generative judge server and evaluation all import from
here, so a judge is prompted at serving time exactly as it was during training.

Answer formats:
  pointwise  <think>reasoning</think><score>N</score>    N an integer in 0..4
  pairwise   <think>reasoning</think><better>A</better>  A or B

Parsing is strict on purpose (a GRPO policy learns to exploit any leniency): the answer tag is looked
for only after the last ``</think>``, exactly one answer tag must be there, and its content must be a
valid value. Anything else is a format failure with a reason, never a guessed prediction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

Message = dict  # {"role": str, "content": str}
Conversation = str | Sequence[Message]

MIN_SCORE = 0
MAX_SCORE = 4
PAIRWISE_CHOICES = ("A", "B")

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
PAIRWISE_INSTRUCTIONS = (
    "You are an impartial judge. Two candidate responses answer the same conversation. "
    "Decide which one is more helpful for the user. Judge correctness first, then completeness and "
    "clarity; neither the order of the responses nor their length is a merit."
)
PAIRWISE_ANSWER_FORMAT = (
    "First reason step by step inside <think></think>, then name the better response as "
    "<better>A</better> or <better>B</better>."
)


def as_messages(prompt: Conversation) -> list[Message]:
    """A prompt given as plain text or as a message list, as a message list."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    messages = [dict(m) for m in prompt]
    for i, message in enumerate(messages):
        if message.get("role") not in _ROLE_NAMES or not isinstance(message.get("content"), str):
            raise ValueError(f"message {i} needs a role in {sorted(_ROLE_NAMES)} and a string content: {message!r}")
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
    """Messages as a readable transcript embedded in a judge prompt."""
    return "\n\n".join(f"[{_ROLE_NAMES[m['role']]}]\n{m['content']}" for m in messages)


def pointwise_messages(prompt: Conversation, response: str, reference: str | None = None) -> list[Message]:
    """Chat messages that ask a generative judge to rate `response` to `prompt` on 0..4."""
    parts = [
        POINTWISE_INSTRUCTIONS,
        "## Conversation\n" + render_transcript(as_messages(prompt)),
        "## Response to rate\n" + response,
    ]
    if reference is not None:
        parts.append("## Reference answer\n" + reference)
    parts.append(POINTWISE_ANSWER_FORMAT)
    return [{"role": "user", "content": "\n\n".join(parts)}]


def pairwise_messages(prompt: Conversation, response_a: str, response_b: str) -> list[Message]:
    """Chat messages that ask a generative judge which of two responses is better."""
    parts = [
        PAIRWISE_INSTRUCTIONS,
        "## Conversation\n" + render_transcript(as_messages(prompt)),
        "## Response A\n" + response_a,
        "## Response B\n" + response_b,
        PAIRWISE_ANSWER_FORMAT,
    ]
    return [{"role": "user", "content": "\n\n".join(parts)}]


@dataclass(frozen=True)
class Judgement:
    """A parsed judge answer: `value` when the format is right, else `error` says why not."""

    value: int | str | None
    error: str | None = None
    has_think: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


def _answer_part(text: str) -> tuple[str | None, bool, str | None]:
    """(text after the reasoning, whether a think block closed, error)."""
    if not isinstance(text, str):
        return None, False, f"answer is {type(text).__name__}, not text"
    closing = text.rfind("</think>")
    if closing >= 0:
        return text[closing + len("</think>") :], True, None
    if "<think>" in text:
        return None, False, "<think> is never closed"
    return text, False, None


def _single_tag(answer: str, tag: str) -> tuple[str | None, str | None]:
    """The content of exactly one <tag>..</tag> in `answer`, or an error."""
    contents = re.findall(rf"<{tag}>(.*?)</{tag}>", answer, flags=re.DOTALL)
    if not contents:
        return None, f"no <{tag}>...</{tag}> after the reasoning"
    if len(contents) > 1 or answer.count(f"<{tag}>") != 1:
        return None, f"{answer.count(f'<{tag}>')} <{tag}> tags, expected exactly one"
    return contents[0].strip(), None


def parse_pointwise(text: str) -> Judgement:
    """Parse `<think>..</think><score>N</score>`; N must be an integer in MIN_SCORE..MAX_SCORE."""
    answer, has_think, error = _answer_part(text)
    if error:
        return Judgement(None, error, has_think)
    content, error = _single_tag(answer, "score")
    if error:
        return Judgement(None, error, has_think)
    if not re.fullmatch(r"[+-]?\d{1,6}", content):
        return Judgement(None, f"score {content[:40]!r} is not an integer", has_think)
    score = int(content)
    if not MIN_SCORE <= score <= MAX_SCORE:
        return Judgement(None, f"score {score} outside {MIN_SCORE}..{MAX_SCORE}", has_think)
    return Judgement(score, None, has_think)


def parse_pairwise(text: str) -> Judgement:
    """Parse `<think>..</think><better>A|B</better>`."""
    answer, has_think, error = _answer_part(text)
    if error:
        return Judgement(None, error, has_think)
    content, error = _single_tag(answer, "better")
    if error:
        return Judgement(None, error, has_think)
    if content not in PAIRWISE_CHOICES:
        return Judgement(None, f"better {content[:40]!r} is not one of {PAIRWISE_CHOICES}", has_think)
    return Judgement(content, None, has_think)


def normalized_score(score: int) -> float:
    """A pointwise score on MIN_SCORE..MAX_SCORE mapped to [0, 1]."""
    return (score - MIN_SCORE) / (MAX_SCORE - MIN_SCORE)


def pointwise_ground_truth(score: int) -> str:
    """The `reward_model.ground_truth` of a pointwise GRPO row: one JSON string type for every row."""
    if isinstance(score, bool) or not (isinstance(score, int) and MIN_SCORE <= score <= MAX_SCORE):
        raise ValueError(f"pointwise label {score!r} is not an integer in {MIN_SCORE}..{MAX_SCORE}")
    return json.dumps({"score": score})


def pairwise_ground_truth(better: str) -> str:
    """The `reward_model.ground_truth` of a pairwise GRPO row."""
    if better not in PAIRWISE_CHOICES:
        raise ValueError(f"pairwise label {better!r} is not one of {PAIRWISE_CHOICES}")
    return json.dumps({"better": better})


def read_ground_truth(ground_truth: str) -> dict:
    """Decode a ground truth written by pointwise_ground_truth or pairwise_ground_truth."""
    try:
        label = json.loads(ground_truth)
    except (TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"ground truth {ground_truth!r} is not JSON") from err
    if isinstance(label, dict) and set(label) == {"score"}:
        pointwise_ground_truth(label["score"])
    elif isinstance(label, dict) and set(label) == {"better"}:
        pairwise_ground_truth(label["better"])
    else:
        raise ValueError(f'ground truth {ground_truth!r} is neither {{"score": N}} nor {{"better": "A"|"B"}}')
    return label
