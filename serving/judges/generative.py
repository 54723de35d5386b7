"""Generative pointwise judge: a causal LM answers the pointwise template of judge_rewards.protocol.templates with
`<think>..</think><score>N</score>`; N/4 is the score, and an unparsable answer is an error, not a 0."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from judge_rewards.protocol import templates

from ..config import JudgeConfig
from . import hf
from .base import Judge, JudgeItem, Verdict, length_groups

# How much of an unparsable answer an error carries back, for debugging the judge.
ANSWER_EXCERPT_CHARS = 500


@dataclass(frozen=True)
class Generation:
    text: str
    new_tokens: int
    hit_token_limit: bool


class Generator(Protocol):
    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        """One generation per prompt (token ids), in order."""


class GenerativeJudge(Judge):
    def __init__(self, config: JudgeConfig):
        self._config = config
        self.identity = hf.identity(config, "generative")
        self._tokenizer = hf.load_tokenizer(config.model, padding_side="left")
        self._generator = _make_generator(config, self._tokenizer)

    def input_text(self, item: JudgeItem) -> str:
        reference = item.answer if self._config.reference_from_answer else None
        messages = templates.pointwise_messages(item.prompt, item.completion, reference=reference)
        return self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        encodings, verdicts = hf.encode_checked(
            self._tokenizer, [self.input_text(i) for i in items], self._config.max_input_tokens
        )
        readable = [i for i, verdict in enumerate(verdicts) if verdict is None]
        generations = self._generator.generate([encodings[i] for i in readable])
        for index, generation in zip(readable, generations, strict=True):
            verdicts[index] = self._verdict(generation)
        return verdicts

    def _verdict(self, generation: Generation) -> Verdict:
        judgement = templates.parse_pointwise(generation.text)
        metadata = {"generated_tokens": generation.new_tokens}
        if not judgement.ok:
            cut = (
                f" (generation stopped at --max-new-tokens {self._config.max_new_tokens})"
                if generation.hit_token_limit
                else ""
            )
            return Verdict.failed(
                f"unparsable judge answer: {judgement.error}{cut}",
                judge_output=generation.text[:ANSWER_EXCERPT_CHARS],
                **metadata,
            )
        return Verdict(
            score=templates.normalized_score(judgement.value),
            explanation=(judgement.reasoning or "").strip(),
            metadata={"judge_score": judgement.value, **metadata},
        )


def _make_generator(config: JudgeConfig, tokenizer) -> Generator:
    if config.backend == "vllm":
        from .vllm_backend import VllmGenerator

        return VllmGenerator(config)
    return TransformersGenerator(config, tokenizer)


class TransformersGenerator:
    """Batched `generate` of a transformers causal LM, left-padded, in groups of similar prompt lengths."""

    def __init__(self, config: JudgeConfig, tokenizer):
        import torch
        from transformers import AutoModelForCausalLM

        self._torch = torch
        self._config = config
        self._tokenizer = tokenizer
        self._device = hf.resolve_device(config.device)
        self._model = (
            AutoModelForCausalLM.from_pretrained(config.model, torch_dtype=hf.resolve_dtype(config.dtype, self._device))
            .to(self._device)
            .eval()
        )
        self._stop_ids = _stop_token_ids(self._model.generation_config, tokenizer)
        torch.manual_seed(config.seed)

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        results: list[Generation | None] = [None] * len(prompts)
        for group in length_groups([len(p) for p in prompts], self._config.max_padding_fraction):
            for index, generation in zip(group, self._generate_padded([prompts[i] for i in group]), strict=True):
                results[index] = generation
        return results

    def _generate_padded(self, prompts: list[list[int]]) -> list[Generation]:
        batch = self._tokenizer.pad({"input_ids": prompts}, return_tensors="pt").to(self._device)
        with self._torch.inference_mode():
            output = self._model.generate(**batch, **self._sampling_arguments())
        new_tokens = output[:, batch["input_ids"].shape[1] :].tolist()
        return [self._generation(tokens) for tokens in new_tokens]

    def _sampling_arguments(self) -> dict:
        config = self._config
        arguments = {
            "max_new_tokens": config.max_new_tokens,
            "pad_token_id": self._tokenizer.pad_token_id,
            "eos_token_id": sorted(self._stop_ids),
        }
        if config.temperature > 0:
            return {**arguments, "do_sample": True, "temperature": config.temperature, "top_p": config.top_p}
        return {**arguments, "do_sample": False, "temperature": None, "top_p": None, "top_k": None}

    def _generation(self, tokens: list[int]) -> Generation:
        stop = next((i for i, token in enumerate(tokens) if token in self._stop_ids), None)
        kept = tokens if stop is None else tokens[:stop]
        return Generation(
            text=self._tokenizer.decode(kept, skip_special_tokens=True),
            new_tokens=len(kept),
            hit_token_limit=stop is None,
        )


def _stop_token_ids(generation_config, tokenizer) -> set[int]:
    """The end-of-turn ids of the model's generation config and of the tokenizer."""
    configured = generation_config.eos_token_id
    ids = set(configured if isinstance(configured, list) else [configured] if configured is not None else [])
    ids.add(tokenizer.eos_token_id)
    return {i for i in ids if i is not None}
