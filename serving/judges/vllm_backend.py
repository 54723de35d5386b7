"""vLLM engine for generative judges on GPUs (vLLM 0.11 offline `LLM` API).

Imported only when `--backend vllm` is chosen. The engine call itself is NOT TESTED in this repository's CI:
vLLM cannot be installed on its CPU-only machines. Tested are the clear error without vLLM and
`generation_from_vllm`, the mapping of vLLM 0.11's `CompletionOutput` to our `Generation` (on plain objects
of that shape).

For --score-mode expected, each generated step reports its top TOP_LOGPROBS log-probabilities (vLLM's default
`logprobs_mode`, raw_logprobs: a softmax of the raw logits, before temperature or top-p), plus the sampled
token's. An answer value outside a step's top TOP_LOGPROBS gets probability 0 there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..config import JudgeConfig
from .base import BackendUnavailable
from .generative import Generation

# Log-probabilities vLLM reports per generated step: its default `max_logprobs`, the most it allows unless raised.
TOP_LOGPROBS = 20


class VllmGenerator:
    """Generation with vLLM: its continuous batching takes the whole batch at once, so no length groups."""

    def __init__(self, config: JudgeConfig, candidate_ids: Sequence[int] = ()):
        try:
            from vllm import LLM, SamplingParams
        except ImportError as err:
            raise BackendUnavailable(
                "--backend vllm needs vLLM 0.11 on a CUDA machine (`pip install -e '.[gpu]'`); "
                f"it cannot be imported here: {err}. Use --backend transformers instead."
            ) from err
        self._candidate_ids = tuple(candidate_ids)
        self._llm = LLM(
            model=config.model,
            dtype=config.dtype,
            seed=config.seed,
            gpu_memory_utilization=config.gpu_memory_utilization,
            max_model_len=config.max_input_tokens + config.max_new_tokens,
        )
        self._sampling = SamplingParams(
            temperature=config.temperature,
            top_p=config.top_p,
            max_tokens=config.max_new_tokens,
            skip_special_tokens=True,
            logprobs=TOP_LOGPROBS if self._candidate_ids else None,
        )

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        requests = [{"prompt_token_ids": ids} for ids in prompts]
        outputs = self._llm.generate(requests, self._sampling, use_tqdm=False)
        return [generation_from_vllm(output.outputs[0], self._candidate_ids) for output in outputs]


def generation_from_vllm(completion, candidate_ids: Sequence[int]) -> Generation:
    """A vLLM 0.11 `CompletionOutput` (text, token_ids, finish_reason, and logprobs: one {token_id: Logprob}
    per generated token, or None when not asked for) as a Generation; a candidate missing from a step's
    reported log-probabilities gets -inf (probability 0) there."""
    steps = completion.logprobs if candidate_ids else None
    return Generation(
        text=completion.text,
        token_ids=tuple(completion.token_ids),
        hit_token_limit=completion.finish_reason == "length",
        candidate_logprobs=tuple(_candidate_row(step, candidate_ids) for step in steps or ()),
    )


def _candidate_row(step: dict, candidate_ids: Sequence[int]) -> tuple[float, ...]:
    return tuple(step[token].logprob if token in step else -math.inf for token in candidate_ids)
