"""Test and benchmark models built from a base model (never shipped in a product package)."""

from __future__ import annotations

from pathlib import Path


def build_scalar_judge(base_model_dir: str | Path, out_dir: str | Path, seed: int = 0) -> Path:
    """An untrained scalar judge in the Bradley-Terry export format: the base model with a fresh one-label
    sequence-classification head (initialised with `seed`), its tokenizer and judge.json. For tests and
    benchmarks, where the cost of scoring matters and the quality does not."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from judge_rewards.protocol.judge_spec import JudgeSpec

    out_dir = Path(out_dir)
    torch.manual_seed(seed)
    AutoModelForSequenceClassification.from_pretrained(base_model_dir, num_labels=1).save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(base_model_dir).save_pretrained(out_dir)
    JudgeSpec(kind="scalar", trained_with={"recipe": "untrained head", "base_model": str(base_model_dir)}).save(out_dir)
    return out_dir
