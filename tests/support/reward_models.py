"""Tiny random-init stand-ins for off-the-shelf reward models: HF sequence classifiers without judge.json, each
built from the config class of an architecture such models use, with a chat template of its family's kind and a
small byte-level BPE tokenizer trained here (no hub download).

- llama3: LlamaForSequenceClassification (Skywork-Reward-V2-Llama, RLHFlow's Llama-3 RMs), Llama 3.1's rope
  scaling; the Llama-3-8B-Instruct template, which renders <|begin_of_text|>, and a tokenizer that adds it too
  when asked for special tokens (the duplicated BOS RLHFlow's usage strips).
- qwen3: Qwen3ForSequenceClassification (Skywork-Reward-V2-Qwen3), ChatML without any BOS, the final assistant
  turn opened by Qwen3's empty think block.
- gemma: GemmaForSequenceClassification (Gemma reward models), <bos><start_of_turn>, no system role, the
  tokenizer adding <bos> too.

Attention heads are 64 wide (vLLM's CPU attention takes them). `build` writes one model directory;
`reference_rewards` is what each model's authors compute: the model's own fp32 forward on
`tokenizer.apply_chat_template(messages, tokenize=True)`, one conversation at a time, all outputs of the head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HIDDEN, HEADS, LAYERS = 128, 2, 2
CORPUS = [
    "What is the capital of France? The capital of France is Paris. The answer is 42.",
    "Regular exercise improves cardiovascular health, mood and sleep. Exercise is good for you.",
    "You are a helpful assistant. Answer briefly and correctly. Explain your reasoning step by step.",
    "the of and to in is that it for on with as was at by an be this which or from judge reward model",
    "user assistant system model 0 1 2 3 4 5 6 7 8 9 + - * / = ( ) . , ; : ? ! ' \" \n\n\n",
]

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and loop.last %}"
    "{{- '<|im_start|>assistant\n<think>\n\n</think>\n\n' + message.content.lstrip('\n') + '<|im_end|>\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)


@dataclass(frozen=True)
class Family:
    architecture: str
    template: str
    special: dict  # bos / eos / pad token text (bos None: no BOS at all)
    markup: tuple[str, ...]  # the template's other special tokens
    tokenizer_adds_bos: bool


FAMILIES = {
    "llama3": Family(
        "LlamaForSequenceClassification",
        LLAMA3_TEMPLATE,
        {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "pad": "<|finetune_right_pad_id|>"},
        ("<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>"),
        tokenizer_adds_bos=True,
    ),
    "qwen3": Family(
        "Qwen3ForSequenceClassification",
        QWEN3_TEMPLATE,
        {"bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>"},
        ("<|im_start|>",),
        tokenizer_adds_bos=False,
    ),
    "gemma": Family(
        "GemmaForSequenceClassification",
        GEMMA_TEMPLATE,
        {"bos": "<bos>", "eos": "<eos>", "pad": "<pad>"},
        ("<start_of_turn>", "<end_of_turn>"),
        tokenizer_adds_bos=True,
    ),
}


def build_tokenizer(family: Family):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    special = [token for token in (family.special["pad"], family.special["bos"], family.special["eos"]) if token]
    special += list(family.markup)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(CORPUS * 4, trainer=trainer)
    bos = family.special["bos"]
    if family.tokenizer_adds_bos:  # as Llama 3's and Gemma's tokenizers: BOS first when asked for special tokens
        bos_id = bpe.token_to_id(bos)
        bpe.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=bos,
        eos_token=family.special["eos"],
        pad_token=family.special["pad"],
        additional_special_tokens=list(family.markup),
        chat_template=family.template,
        model_max_length=4096,
    )


def size_settings(tokenizer, num_labels: int) -> dict:
    """The tiny size every family's config shares: 64-wide attention heads, the tokenizer's vocabulary."""
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 1,
        "head_dim": HIDDEN // HEADS,
        "max_position_embeddings": 4096,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "num_labels": num_labels,
        "torch_dtype": "float32",
    }


def model_config(family: Family, tokenizer, num_labels: int):
    """The architecture's config class with its family's characteristic settings, at a tiny size."""
    from transformers import GemmaConfig, LlamaConfig, Qwen3Config

    size = size_settings(tokenizer, num_labels)
    if family.architecture.startswith("Llama"):  # Llama 3.1's (Skywork-Reward-V2-Llama-3.1-8B's base)
        rope = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
        rope |= {"original_max_position_embeddings": 8192, "rope_type": "llama3"}
        return LlamaConfig(
            **{**size, "max_position_embeddings": 131072},
            bos_token_id=tokenizer.bos_token_id,
            rope_theta=500000.0,
            rope_scaling=rope,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
        )
    if family.architecture.startswith("Qwen3"):  # Qwen3's: q/k norms, tied embeddings, no BOS
        return Qwen3Config(**size, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
    return GemmaConfig(  # Gemma's: scaled embeddings, GeLU-tanh, (1 + weight) RMSNorm
        **size,
        bos_token_id=tokenizer.bos_token_id,
        hidden_activation="gelu_pytorch_tanh",
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
    )


def build(family_name: str, out_dir: str | Path, seed: int = 0, labels: Sequence[str] | None = None) -> Path:
    """An off-the-shelf-style reward model directory of `family_name` (config, weights, tokenizer; no judge.json):
    one output, or one per name of `labels` (its id2label). The head's weights are drawn large enough that its
    outputs spread over several units: a wrong token or an activation moves them visibly."""
    import torch
    from transformers import AutoModelForSequenceClassification

    family = FAMILIES[family_name]
    tokenizer = build_tokenizer(family)
    config = model_config(family, tokenizer, len(labels) if labels else 1)
    config.architectures = [family.architecture]
    if labels:
        config.id2label = dict(enumerate(labels))
        config.label2id = {name: index for index, name in enumerate(labels)}
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def reference_rewards(model_dir: str | Path, conversations: Sequence[Sequence[dict]], ids_of=None) -> list[list[float]]:
    """Every head output of each conversation, as the model's authors compute it: the model in fp32, its own
    forward on `ids_of(tokenizer, messages)` (by default `tokenizer.apply_chat_template(messages, tokenize=True)`,
    `token_ids`), one conversation at a time, no activation."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    return [forward(model, (ids_of or token_ids)(tokenizer, messages)) for messages in conversations]


def token_ids(tokenizer, messages: Sequence[dict]) -> list[int]:
    """`apply_chat_template(messages, tokenize=True)` as a list of ids, on transformers 4 and 5 alike."""
    ids = tokenizer.apply_chat_template(list(messages), tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def forward(model, ids: Sequence[int]) -> list[float]:
    import torch

    with torch.inference_mode():
        return model(input_ids=torch.tensor([list(ids)])).logits[0].float().tolist()


# A multi-label head's names, in output order: neither sorted nor a prefix of any order a wrong mapping would give
# (twelve of them, so that string keys "10", "11" sort before "2").
LABELS = (
    "helpfulness", "safety", "correctness", "verbosity", "coherence", "complexity",
    "honesty", "style", "accuracy", "relevance", "depth", "brevity",
)  # fmt: skip
LONG_WORDS = 150  # a completion of this many words is longer than the tests' --max-input-tokens


def requests() -> list[dict]:
    """Judge requests every family's template renders (no system turn: Gemma's refuses one): two prompts with three
    completions each, as a GRPO group sends them (the judge computes a shared prompt once), a multi-turn prompt
    given as messages, an empty completion."""
    question = "What is the capital of France?"
    completions = ["Paris.", "The answer is 42.", "Exercise is good for you, and the capital of France is Paris."]
    found = [{"prompt": question, "completion": completion} for completion in completions]
    found += [{"prompt": "Explain your reasoning step by step: 2 + 2 = ?", "completion": c} for c in completions]
    turns = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello, how can I help?"},
        {"role": "user", "content": question},
    ]
    found += [{"prompt": turns, "completion": "It is Paris."}, {"prompt": question, "completion": ""}]
    return [{**request, "request_id": f"r{index}"} for index, request in enumerate(found)]


def long_request() -> dict:
    """A conversation whose end is what a left truncation keeps."""
    words = " ".join(["the judge reads every answer and scores it"] * (LONG_WORDS // 8))
    return {
        "prompt": "What is the capital of France?",
        "completion": f"{words} The answer is Paris.",
        "request_id": "long",
    }


def conversation(request: dict) -> list[dict]:
    """The messages a request's conversation is: its prompt's turns, then the completion as the assistant's."""
    prompt = request["prompt"]
    turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    return turns + [{"role": "assistant", "content": request["completion"]}]


def left_truncated_ids(tokenizer, messages: Sequence[dict], max_tokens: int) -> list[int]:
    """The ids a model's authors score for a conversation longer than `max_tokens` when they keep its end: the
    chat template's text, less the BOS it renders, tokenized by the tokenizer with truncation_side "left", which
    adds the BOS itself after truncating (RLHFlow's usage, with truncation)."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False)
    bos = tokenizer.bos_token
    has_bos = bos is not None and text.startswith(bos)
    tokenizer.truncation_side = "left"
    ids = tokenizer(text.removeprefix(bos) if has_bos else text, add_special_tokens=has_bos, truncation=True,
                    max_length=max_tokens)["input_ids"]  # fmt: skip
    assert not has_bos or ids[0] == tokenizer.bos_token_id, "the tokenizer did not add the BOS the template renders"
    return list(ids)


def judge_item(request: dict):
    from judge_core.protocol.judge_api import JudgeItem

    return JudgeItem(request["prompt"], request["completion"])
