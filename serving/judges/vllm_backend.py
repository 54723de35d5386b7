"""vLLM engine for generative judges on GPUs (vLLM 0.11 offline `LLM` API).

Imported only when `--backend vllm` is chosen. NOT TESTED in this repository's CI: vLLM cannot be
installed on its CPU-only machines; only the clear error without vLLM is tested.
"""

from __future__ import annotations

from ..config import JudgeConfig
from .base import BackendUnavailable
from .generative import Generation


class VllmGenerator:
    """Generation with vLLM: its continuous batching takes the whole batch at once, so no length groups."""

    def __init__(self, config: JudgeConfig):
        try:
            from vllm import LLM, SamplingParams
        except ImportError as err:
            raise BackendUnavailable(
                "--backend vllm needs vLLM 0.11 on a CUDA machine (`pip install -e '.[gpu]'`); "
                f"it cannot be imported here: {err}. Use --backend transformers instead."
            ) from err
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
        )

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        requests = [{"prompt_token_ids": ids} for ids in prompts]
        outputs = self._llm.generate(requests, self._sampling, use_tqdm=False)
        return [_generation(output.outputs[0]) for output in outputs]


def _generation(completion) -> Generation:
    return Generation(
        text=completion.text, new_tokens=len(completion.token_ids), hit_token_limit=completion.finish_reason == "length"
    )
