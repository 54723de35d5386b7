"""Loading Hugging Face judge directories: device, dtype, tokenizer, identity, and checked encoding."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from judge_rewards.protocol.judge_spec import SPEC_FILE

from ..config import JudgeConfig
from .base import JudgeIdentity, Verdict

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def resolve_dtype(name: str, device: str):
    import torch

    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, name)


def load_tokenizer(model_dir: str, padding_side: str):
    """The judge's tokenizer; it must have a chat template and a pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if not tokenizer.chat_template:
        raise ValueError(f"{model_dir}: the tokenizer has no chat template; judges are prompted through it")
    if tokenizer.pad_token_id is None:
        raise ValueError(f"{model_dir}: the tokenizer has no pad token; set one distinct from content tokens")
    tokenizer.padding_side = padding_side
    # Texts are tokenized once, then padded per length group; transformers warns about that pattern.
    tokenizer.deprecation_warnings["Asking-to-pad-a-fast-tokenizer"] = True
    return tokenizer


def identity(config: JudgeConfig, kind: str) -> JudgeIdentity:
    """What /health says about a model judge loaded from config.model and run on config.backend."""
    model_dir = Path(config.model)
    return JudgeIdentity(
        kind=kind,
        backend=config.backend,
        model_id=config.model_id or model_dir.resolve().name,
        model_version=config.model_version or fingerprint(model_dir),
    )


def fingerprint(model_dir: Path) -> str:
    """A short hash of judge.json, config.json and the weight files' names and sizes (cheap at any size)."""
    digest = hashlib.sha256()
    for name in (SPEC_FILE, "config.json"):
        path = model_dir / name
        digest.update(path.read_bytes() if path.is_file() else b"")
    for path in sorted(p for p in model_dir.iterdir() if p.suffix in WEIGHT_SUFFIXES):
        digest.update(json.dumps([path.name, path.stat().st_size]).encode())
    return digest.hexdigest()[:12]


def encode_checked(tokenizer, texts: Sequence[str], max_tokens: int) -> tuple[list[list[int]], list[Verdict | None]]:
    """Token ids of `texts` (their chat template already holds the special tokens), and their length_verdicts."""
    encodings = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    return encodings, length_verdicts(encodings, max_tokens)


def length_verdicts(encodings: Sequence[Sequence[int]], max_tokens: int) -> list[Verdict | None]:
    """An error verdict for each judge input no engine can take, empty or longer than `max_tokens`; None for the
    others. Empty: a judge whose chat template renders only the item's own text, given an empty one."""
    return [_length_error(len(ids), max_tokens) for ids in encodings]


def _length_error(tokens: int, max_tokens: int) -> Verdict | None:
    if tokens == 0:
        return Verdict.failed("judge input is empty (0 tokens): the judge's chat template renders nothing for it")
    if tokens > max_tokens:
        return Verdict.failed(f"judge input is {tokens} tokens, longer than --max-input-tokens {max_tokens}")
    return None
