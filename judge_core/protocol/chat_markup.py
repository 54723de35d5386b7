"""A policy's rollout as the judge reads it: the prompt (plain text, or {role, content} messages) and the response as
plain text, recovered from the chat-templated text an RL trainer holds.

OpenRLHF's remote reward sends, per sample, `query` (the prompt and the response decoded together, special tokens
kept) and `prompts` (the prompt text it gave the policy, usually already chat-templated). `split_rollout`:
  1. the response is what `query` holds after `prompt`; a query that does not begin with its prompt is refused;
  2. a prompt in a known chat markup (ChatML, Llama 3, Gemma) becomes its messages; it must be whole turns ending
     with the assistant's open turn (the generation prompt), else it is refused. A prompt with none of these
     markups is plain text and is judged as it is;
  3. the response ends at the markup's end-of-turn token (what follows it is not the policy's answer), and end of
     text tokens at its end are dropped.
Every refusal is a `RolloutTextError` saying why, for the caller to report per item; nothing is guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .templates import Conversation

END_OF_TEXT_TOKENS = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")


class RolloutTextError(ValueError):
    """The prompt or the response cannot be recovered from the rollout's text."""


@dataclass(frozen=True)
class ChatMarkup:
    name: str
    turn: re.Pattern  # one whole turn: groups role, content
    generation_prompt: re.Pattern  # the assistant's open turn that ends a prompt
    end_of_turn: str
    begin: str = ""  # a begin-of-text token the prompt may start with
    assistant_role: str = "assistant"

    def is_used_by(self, prompt: str) -> bool:
        return self.end_of_turn in prompt or self.generation_prompt.search(prompt) is not None

    def messages(self, prompt: str) -> list[dict]:
        text = prompt.removeprefix(self.begin)
        header = self.generation_prompt.search(text)
        if header is None or header.end() != len(text):
            raise RolloutTextError(
                f"the prompt is {self.name} markup but does not end with the assistant's open turn "
                f"(the generation prompt): ...{text[-80:]!r}"
            )
        messages, position = [], 0
        for turn in self.turn.finditer(text[: header.start()]):
            if turn.start() != position:
                break
            role = "assistant" if turn.group("role") == self.assistant_role else turn.group("role")
            messages.append({"role": role, "content": turn.group("content")})
            position = turn.end()
        if position != header.start() or not messages:
            raise RolloutTextError(
                f"the prompt is {self.name} markup but not a sequence of whole turns before the generation prompt: "
                f"{text[position : position + 80]!r} at character {position}"
            )
        return messages


MARKUPS = (
    ChatMarkup(
        "ChatML",
        re.compile(r"<\|im_start\|>(?P<role>system|user|assistant)\n(?P<content>.*?)<\|im_end\|>\n?", re.S),
        # Qwen3's template with thinking off opens the assistant's turn with an empty think block
        re.compile(r"<\|im_start\|>assistant\n(?:<think>\n\n</think>\n\n)?"),
        "<|im_end|>",
    ),
    ChatMarkup(
        "Llama 3",
        re.compile(
            r"<\|start_header_id\|>(?P<role>system|user|assistant)<\|end_header_id\|>\n\n(?P<content>.*?)<\|eot_id\|>",
            re.S,
        ),
        re.compile(r"<\|start_header_id\|>assistant<\|end_header_id\|>\n\n"),
        "<|eot_id|>",
        begin="<|begin_of_text|>",
    ),
    ChatMarkup(
        "Gemma",
        re.compile(r"<start_of_turn>(?P<role>user|model)\n(?P<content>.*?)<end_of_turn>\n?", re.S),
        re.compile(r"<start_of_turn>model\n"),
        "<end_of_turn>",
        begin="<bos>",
        assistant_role="model",
    ),
)


def split_rollout(query: str, prompt: str) -> tuple[Conversation, str]:
    """(the prompt as text or messages, the response as text) of a rollout, as the module docstring says."""
    if not isinstance(query, str) or not isinstance(prompt, str):
        raise RolloutTextError(f"query and prompt must be text, got {type(query).__name__} and {type(prompt).__name__}")
    if not query.startswith(prompt):
        raise RolloutTextError(
            f"the query does not begin with its prompt, so the response cannot be told apart: the prompt begins "
            f"{prompt[:60]!r}, the query {query[:60]!r}"
        )
    response = query[len(prompt) :]
    markup = next((markup for markup in MARKUPS if markup.is_used_by(prompt)), None)
    if markup is None:
        return prompt, _without_end_of_text(response)
    return markup.messages(prompt), _without_end_of_text(response.split(markup.end_of_turn, 1)[0])


def _without_end_of_text(text: str) -> str:
    while True:
        stripped = text.rstrip()
        for token in END_OF_TEXT_TOKENS:
            stripped = stripped.removesuffix(token)
        if stripped == text:
            return text
        text = stripped
