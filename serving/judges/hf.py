"""Loading Hugging Face judge directories: device, dtype, tokenizer, identity, and checked encoding."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from judge_core.protocol.judge_spec import SPEC_FILE
from judge_models.config import JudgeConfig

from .base import JudgeIdentity, Verdict

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
# A conversation every chat template can render (Gemma's refuses a system turn) to see where its BOS comes from.
BOS_PROBE = ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"})

log = logging.getLogger(__name__)


def load_chat_tokenizer(model_dir: str):
    """A model's tokenizer; it must have a chat template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if not tokenizer.chat_template:
        raise ValueError(f"{model_dir}: the tokenizer has no chat template; judges are prompted through it")
    return tokenizer


def load_tokenizer(model_dir: str, padding_side: str):
    """The judge's tokenizer; it must have a chat template and a pad token."""
    tokenizer = load_chat_tokenizer(model_dir)
    if tokenizer.pad_token_id is None:
        raise ValueError(f"{model_dir}: the tokenizer has no pad token; set one distinct from content tokens")
    tokenizer.padding_side = padding_side
    # Texts are tokenized once, then padded per length group; transformers warns about that pattern.
    tokenizer.deprecation_warnings["Asking-to-pad-a-fast-tokenizer"] = True
    duplicated, handling = bos_handling(tokenizer)
    (log.warning if duplicated else log.info)("%s: %s", model_dir, handling)
    return tokenizer


def bos_handling(tokenizer) -> tuple[bool, str]:
    """(whether the chat template and the tokenizer both add a BOS, what the judge does about the BOS). Judge
    inputs are the chat template's text tokenized without added special tokens, the ids of
    `apply_chat_template(messages, tokenize=True)`: a BOS the template renders is read once, even by a tokenizer
    that adds one again when asked for special tokens (where `tokenizer(text)` would read two; RLHFlow's and
    Skywork's usage strip the template's one before such a call, to the same one BOS)."""
    bos = tokenizer.bos_token
    if tokenizer.bos_token_id is None:
        return False, "BOS: the tokenizer has none; the judge reads the chat template's tokens"
    try:
        text = tokenizer.apply_chat_template(list(BOS_PROBE), tokenize=False)
    except Exception as err:  # a template with demands of its own (e.g. a system turn first): nothing to compare
        return False, f"BOS: not checked, the chat template refuses a user and an assistant turn ({err})"
    rendered = tokenizer(text, add_special_tokens=False)["input_ids"]
    added = tokenizer(text)["input_ids"]
    template_renders = rendered[:1] == [tokenizer.bos_token_id]
    tokenizer_adds = added[:1] == [tokenizer.bos_token_id] and added[1 : len(rendered) + 1] == rendered
    if template_renders and tokenizer_adds:
        return True, (
            f"duplicated BOS: the chat template renders {bos} and the tokenizer adds another when asked for special "
            f"tokens; the judge reads one {bos} (apply_chat_template(tokenize=True)'s ids: the template's tokens, "
            "no added special tokens)"
        )
    if template_renders:
        return False, f"BOS: the chat template renders {bos}; the judge reads it once"
    if tokenizer_adds:
        return False, (
            f"BOS: the chat template renders no {bos}, although the tokenizer adds one when asked for special "
            "tokens; the judge reads none, as apply_chat_template(tokenize=True) does"
        )
    return False, f"BOS: neither the chat template nor the tokenizer adds {bos}; the judge reads none"


def identity(
    config: JudgeConfig, kind: str, scoring: str = "", tokenization: str = "", reads_answer: bool = False
) -> JudgeIdentity:
    """What /health says about a model judge loaded from config.model and run on config.backend."""
    model_dir = Path(config.model)
    return JudgeIdentity(
        kind=kind,
        backend=config.backend,
        model_id=config.model_id or model_dir.resolve().name,
        model_version=config.model_version or fingerprint(model_dir),
        scoring=scoring,
        tokenization=tokenization,
        reads_answer=reads_answer,
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
