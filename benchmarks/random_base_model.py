"""A random-init causal LM of a published model's shape, for benchmarks on machines that cannot download it
(the lent GPU machine has no hub access). Speed depends on the shape, not on the weights.

    python -m benchmarks.random_base_model --tokenizer runs/demo/models/smollm2 --out /tmp/smollm2-1.7b-shape

The tokenizer directory gives the vocabulary, chat template and special tokens; it must be one the shape was
published with (SmolLM2's tokenizer is shared by all three sizes).
"""

from __future__ import annotations

import argparse
from pathlib import Path

SHAPES = {  # config.json fields of the published checkpoints that matter for speed
    "smollm2-1.7b": {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 8192,
        "rope_theta": 130000.0,
        "rms_norm_eps": 1e-5,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
    },
}


def build(shape: str, tokenizer_dir: Path, out_dir: Path, seed: int = 0) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        **SHAPES[shape],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if len(tokenizer) > config.vocab_size:
        raise SystemExit(f"{tokenizer_dir}: {len(tokenizer)} tokens, more than {shape}'s vocabulary")
    torch.manual_seed(seed)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-1.7b", help="published model shape")
    parser.add_argument("--tokenizer", type=Path, required=True, help="tokenizer directory of that model family")
    parser.add_argument("--out", type=Path, required=True, help="directory to write the model to")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args()
    print(build(args.shape, args.tokenizer, args.out, args.seed))


if __name__ == "__main__":
    main()
