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


def save_successor_judge(tokenizer, successors: dict[int, int], out_dir: str | Path) -> Path:
    """A generative judge (a real Llama causal LM, its tokenizer and judge.json) whose greedy next token
    after each token of `successors` is that token's successor. Attention and MLP outputs are zeroed, so a
    position's logits depend on its own token only; the embeddings of the mapped tokens are one-hot and the
    LM head maps each to its successor. Tests of what surrounds the model (parsing, batching, ordering)
    script its answers this way."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from judge_rewards.protocol.judge_spec import JudgeSpec

    width = max(4, len(successors) + len(successors) % 2)  # one dimension per mapped token; even for 2 heads
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
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for dimension, (token, successor) in enumerate(successors.items()):
            model.model.embed_tokens.weight[token, dimension] = 1.0
            model.lm_head.weight[successor, dimension] = 10.0
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    JudgeSpec(kind="generative").save(out_dir)
    return Path(out_dir)
