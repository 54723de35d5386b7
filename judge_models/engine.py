"""The engines a judge runs on, behind one interface: a scalar judge's `ScalarEngine` (raw head outputs of token
ids) and a generative judge's `Generator` (one `Generation` per prompt), each implemented in process by
transformers_engine.py and by vllm_engine.py; a generative judge's also by an OpenAI-compatible engine elsewhere
(openai_engine.py). Which one runs: --backend auto picks vLLM wherever it can be imported (the serving
environment, a GPU install with vLLM), transformers elsewhere, and says why; openai only when named."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# vLLM logs to stdout unless told otherwise, where this project's commands print their reports and results.
VLLM_LOG_STREAM = "ext://sys.stderr"


@dataclass(frozen=True)
class BackendChoice:
    name: str  # transformers or vllm
    reason: str  # why: what /health and the start-up line report


def choose_backend(requested: str) -> BackendChoice:
    """The backend --backend `requested` names; for auto, vllm when vLLM imports here, else transformers."""
    if requested != "auto":
        return BackendChoice(requested, f"--backend {requested}")
    problem = vllm_import_problem()
    if problem is None:
        return BackendChoice("vllm", f"--backend auto: vLLM {import_vllm().__version__} importable")
    return BackendChoice("transformers", f"--backend auto: vLLM not importable: {problem}")


def vllm_import_problem() -> str | None:
    """None when `import vllm` works here, else why not (a missing module is told without trying to import)."""
    if importlib.util.find_spec("vllm") is None:
        return "no module named vllm"
    try:
        import_vllm()
    except Exception as err:  # a broken install (missing CUDA libraries, wrong torch) means: not usable here
        return f"{type(err).__name__}: {err}"
    return None


def import_vllm():
    """The vllm module, its logs sent to stderr unless VLLM_LOGGING_STREAM says otherwise (set before its import)."""
    os.environ.setdefault("VLLM_LOGGING_STREAM", VLLM_LOG_STREAM)
    return importlib.import_module("vllm")


def is_vision_model(model_dir: str) -> bool:
    """Whether the model reads images: its config has a vision tower (a vision-language model)."""
    config = Path(model_dir) / "config.json"
    return config.is_file() and "vision_config" in json.loads(config.read_text())


class BackendUnavailable(RuntimeError):
    """The chosen inference engine cannot run on this machine."""


class ScalarEngine(Protocol):
    """A scalar judge's model call."""

    def raw_outputs(self, inputs: Sequence[Sequence[int]], groups: Sequence[Sequence[int]]) -> list[list[float]]:
        """The raw outputs (num_labels each: the reward, or one per attribute) of judge inputs (token ids, each
        ending with a token other than the pad token), in their order. `groups` partitions the inputs'
        indices into inputs that share a prompt; an engine may compute each group's shared prefix once."""


@dataclass(frozen=True)
class Generation:
    """A generated answer. `candidate_logprobs[step][j]` is the log-probability the judge gave candidate token j
    (the generator's `candidate_ids`) at that generated step; -inf where the engine did not report it. Empty when
    no candidates were asked for."""

    text: str
    token_ids: tuple[int, ...]  # empty where a remote engine names its tokens by text only
    hit_token_limit: bool
    candidate_logprobs: tuple[tuple[float, ...], ...] = ()
    generated: int | None = None  # tokens generated, where token_ids does not say (a remote engine's usage)

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids) if self.generated is None else self.generated


@dataclass(frozen=True)
class GenerationFailure:
    """A prompt a remote engine could not answer, after its retries: that judgement's error, never a score."""

    error: str


Images = Sequence[Sequence[bytes]]  # per prompt, the images (encoded bytes) its image tokens stand for, in order
MAX_IMAGES_PER_PROMPT = 8  # what an in-process vision engine is set up for (vLLM reserves room for them)


def pil_images(images: Sequence[bytes]) -> list:
    """Encoded images as the RGB PIL images the engines' processors take."""
    import io

    from PIL import Image

    return [Image.open(io.BytesIO(image)).convert("RGB") for image in images]


class Generator(Protocol):
    def generate(
        self, prompts: list[list[int]], images: Images | None = None, conversations: Sequence[list[dict]] = ()
    ) -> list[Generation | GenerationFailure]:
        """One generation per prompt (token ids), in order; an in-process engine never fails one alone. A vision
        model's prompt holds one image token per image of `images` (the engine expands it); `conversations`, the
        messages the prompts were rendered from, is for an engine elsewhere, which renders them itself."""
