"""Answers sampled from a causal LM as a GRPO rollout samples them: its chat template with the generation prompt,
`n` answers per conversation at `temperature` (top-p 1), at most `max_new_tokens` each.

Two engines: vLLM (`vllm`, where it can be imported: the engine settings of the judge server's vLLM backend, and
`n` in one request, so a conversation's prompt is computed once) and transformers (`num_return_sequences`,
CONVERSATIONS_PER_BATCH conversations at a time), and they sample different answers. On vLLM each conversation has a
seed of its own, made from `seed` and the conversation: its answers do not depend on the other conversations or on
the engine's scheduling of them, so a rerun on the same weights samples the same answers up to the last bits of
batched arithmetic. On transformers one seed is drawn from batch after batch: the same file, seed and machine sample
the same answers, but a conversation's answers change with what comes before it.
"""

from __future__ import annotations

import hashlib
import json

from judge_models.engine import choose_backend

CONVERSATIONS_PER_BATCH = 16


def sample_completions(
    model: str,
    conversations: list[list[dict]],
    n: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    backend: str = "transformers",
) -> list[list[str]]:
    """`n` sampled answers (text) per conversation, in conversation order. `backend`: vllm, transformers, or auto
    (vllm where it can be imported: the judge server's choice, judge_models.engine)."""
    if choose_backend(backend).name == "vllm":
        return _sample_with_vllm(model, conversations, n, temperature, max_new_tokens, seed)
    return _sample_with_transformers(model, conversations, n, temperature, max_new_tokens, seed)


def _sample_with_vllm(model, conversations, n, temperature, max_new_tokens, seed) -> list[list[str]]:
    from judge_models.config import JudgeConfig
    from judge_models.engine import import_vllm
    from judge_models.vllm_engine import engine

    config = JudgeConfig(model=model, backend="vllm", seed=seed, temperature=temperature, max_new_tokens=max_new_tokens)
    llm = engine(config, "generate", generated_tokens=max_new_tokens)
    sampling_params = import_vllm().SamplingParams
    # The n answers of a conversation are one request; vLLM seeds its i-th answer with the request's seed + i.
    params = [
        sampling_params(
            n=n, temperature=temperature, top_p=1.0, max_tokens=max_new_tokens, seed=_conversation_seed(seed, c)
        )
        for c in conversations
    ]
    outputs = llm.chat(conversations, params, use_tqdm=False)
    return [[completion.text for completion in output.outputs] for output in outputs]


def _conversation_seed(seed: int, conversation: list[dict]) -> int:
    """A seed below 2**30 (room for vLLM's + i per answer) from `seed` and the conversation's messages."""
    digest = hashlib.sha256(json.dumps([seed, conversation], sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 2


def _sample_with_transformers(model, conversations, n, temperature, max_new_tokens, seed) -> list[list[str]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left")
    module = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    answers = []
    for start in range(0, len(conversations), CONVERSATIONS_PER_BATCH):
        batch = conversations[start : start + CONVERSATIONS_PER_BATCH]
        texts = [tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in batch]
        encoded = tokenizer(
            texts, return_tensors="pt", padding=True, add_special_tokens=False, return_token_type_ids=False
        )
        with torch.no_grad():
            output = module.generate(
                **encoded,
                do_sample=True,
                temperature=temperature,
                max_new_tokens=max_new_tokens,
                num_return_sequences=n,
                pad_token_id=pad_token_id,
            )
        texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
        answers += [texts[i : i + n] for i in range(0, len(texts), n)]
    return answers
