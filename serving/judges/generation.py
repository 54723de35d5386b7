"""What a generative judge's engine returns: one `Generation` per prompt, from any `Generator` (the transformers
one in generative.py, vLLM's in vllm_backend.py); both modules import it from here, neither from the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Generation:
    """A generated answer. `candidate_logprobs[step][j]` is the log-probability the judge gave candidate token j
    (the generator's `candidate_ids`) at that generated step; -inf where the engine did not report it. Empty when
    no candidates were asked for."""

    text: str
    token_ids: tuple[int, ...]
    hit_token_limit: bool
    candidate_logprobs: tuple[tuple[float, ...], ...] = ()

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)


class Generator(Protocol):
    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        """One generation per prompt (token ids), in order."""
