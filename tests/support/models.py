"""Test and benchmark models built from a base model (never shipped in a product package)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path


def build_scalar_judge(base_model_dir: str | Path, out_dir: str | Path, seed: int = 0) -> Path:
    """An untrained scalar judge in the Bradley-Terry export format: the base model with a fresh one-label
    sequence-classification head (initialised with `seed`), its tokenizer and judge.json. For tests and
    benchmarks, where the cost of scoring matters and the quality does not."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from judge_core.protocol.judge_spec import JudgeSpec

    out_dir = Path(out_dir)
    torch.manual_seed(seed)
    AutoModelForSequenceClassification.from_pretrained(base_model_dir, num_labels=1).save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(base_model_dir).save_pretrained(out_dir)
    JudgeSpec(kind="scalar", trained_with={"recipe": "untrained head", "base_model": str(base_model_dir)}).save(out_dir)
    return out_dir


def build_attribute_judge(
    base_model_dir: str | Path, out_dir: str | Path, attribute_weights: dict[str, float], seed: int = 0
) -> Path:
    """An untrained multi-attribute scalar judge: the base model with a fresh head of one label per attribute
    of `attribute_weights` (normal weights of std 0.5, drawn with `seed`: on the tiny model's final hidden states,
    of norm about 8, its predictions spread over about -8..8, below, on and above the 0..4 attribute scale), its
    labels named after the attributes in id2label (as the attribute trainer names them), its tokenizer and
    judge.json naming the attributes and their weights."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from judge_core.protocol.judge_spec import JudgeSpec

    out_dir = Path(out_dir)
    model = AutoModelForSequenceClassification.from_pretrained(base_model_dir, num_labels=len(attribute_weights))
    with torch.no_grad():
        model.score.weight.copy_(torch.randn(model.score.weight.shape, generator=torch.Generator().manual_seed(seed)))
        model.score.weight.mul_(0.5)
    model.config.id2label = dict(enumerate(attribute_weights))
    model.config.label2id = {name: index for index, name in enumerate(attribute_weights)}
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(base_model_dir).save_pretrained(out_dir)
    JudgeSpec(
        kind="scalar",
        attributes=list(attribute_weights),
        attribute_weights=attribute_weights,
        trained_with={"recipe": "untrained attribute head", "base_model": str(base_model_dir)},
    ).save(out_dir)
    return out_dir


def save_successor_judge(
    tokenizer,
    successors: Mapping[int, int | Mapping[int, float]],
    out_dir: str | Path,
    prompt_format: str = "pointwise",
    min_hidden_size: int = 4,
) -> Path:
    """A generative judge (a real Llama causal LM, its tokenizer and judge.json of `prompt_format`) whose greedy
    next token after each token of `successors` is that token's successor. Attention and MLP outputs are zeroed,
    so a position's logits depend on its own token only; the embeddings of the mapped tokens are one-hot and the
    LM head maps each to its successor. A token may map to a distribution {next token: probability} instead:
    its next-token probabilities are then these (to within 1e-12) and greedy decoding takes the likeliest. Tests
    of what surrounds the model (parsing, batching, ordering, probabilities) script its answers this way.
    Its two attention heads are half its hidden size wide: `min_hidden_size` 128 makes them 64 wide, as
    vLLM's CPU attention needs."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from judge_core.protocol.judge_spec import JudgeSpec

    # One dimension per mapped token; even for 2 heads.
    width = max(min_hidden_size, len(successors) + len(successors) % 2)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=width,
        intermediate_size=width,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    # The final RMSNorm scales a one-hot hidden state by this much before the LM head.
    norm_scale = 1 / math.sqrt(1 / width + config.rms_norm_eps)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for dimension, (token, successor) in enumerate(successors.items()):
            model.model.embed_tokens.weight[token, dimension] = 1.0
            if isinstance(successor, Mapping):
                for next_token, probability in successor.items():
                    # Logits log(p) + 40: every unlisted token (logit 0) keeps less than e^-40 of the mass.
                    model.lm_head.weight[next_token, dimension] = (math.log(probability) + 40) / norm_scale
            else:
                model.lm_head.weight[successor, dimension] = 10.0
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    JudgeSpec(kind="generative", prompt_format=prompt_format).save(out_dir)
    return Path(out_dir)


def verl_checkpoint(model_dir: str | Path, save_dir: str | Path, auto_class) -> Path:
    """A one-process verl checkpoint of a model directory, as training leaves it for training.export: the
    plain-tensor shard FSDP saves when one process holds everything, and huggingface/ with config and tokenizer."""
    import json
    import shutil

    import torch

    save_dir = Path(save_dir)
    step = save_dir / "global_step_1"
    shutil.copytree(model_dir, step / "huggingface")
    torch.save(auto_class.from_pretrained(model_dir).state_dict(), step / "model_world_size_1_rank_0.pt")
    (step / "fsdp_config.json").write_text(json.dumps({"world_size": 1}))
    (save_dir / "latest_checkpointed_iteration.txt").write_text("1")
    return save_dir
