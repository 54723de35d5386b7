"""Answers sampled from a causal LM as a GRPO rollout samples them: its chat template with the generation prompt,
`n` answers per conversation at `temperature` (top-p 1), at most `max_new_tokens` each.

Two engines: vLLM (`vllm`, where it can be imported: the engine settings of the judge server's vLLM backend, and
`n` in one request, so a conversation's prompt is computed once) and transformers (`num_return_sequences`,
CONVERSATIONS_PER_BATCH conversations at a time). The same seed, engine, machine and thread count sample the same
answers; the two engines sample different ones.
"""

from __future__ import annotations

from serving.judges.engine_choice import choose_backend

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
    (vllm where it can be imported: the judge server's choice, serving.judges.engine_choice)."""
    if choose_backend(backend).name == "vllm":
        return _sample_with_vllm(model, conversations, n, temperature, max_new_tokens, seed)
    return _sample_with_transformers(model, conversations, n, temperature, max_new_tokens, seed)


def _sample_with_vllm(model, conversations, n, temperature, max_new_tokens, seed) -> list[list[str]]:
    from serving.config import JudgeConfig
    from serving.judges.engine_choice import import_vllm
    from serving.judges.vllm_backend import engine

    config = JudgeConfig(model=model, backend="vllm", seed=seed, max_new_tokens=max_new_tokens)
    llm = engine(config, "generate", generated_tokens=max_new_tokens)
    # The engine's seed makes the run repeatable; the n answers of a conversation are one request.
    params = import_vllm().SamplingParams(n=n, temperature=temperature, top_p=1.0, max_tokens=max_new_tokens)
    outputs = llm.chat(conversations, params, use_tqdm=False)
    return [[completion.text for completion in output.outputs] for output in outputs]


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
