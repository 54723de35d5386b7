"""Which engine runs a model judge: --backend auto picks vLLM wherever it can be imported (the serving
environment, a GPU install with vLLM), the transformers backend elsewhere, and says why."""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass

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
