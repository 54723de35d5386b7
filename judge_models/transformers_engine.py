"""The transformers engine: a judge's model in this process, behind judge_models.engine's interface. A scalar
judge's forwards (`TransformersScalarEngine`: prompt-once packed rows, or padded length groups) and a generative
judge's batched generation (`TransformersGenerator`, with the candidates' log-probabilities of every step)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from . import packing
from .config import JudgeConfig
from .engine import Generation, Images, is_vision_model, pil_images
from .padding import length_groups
from .scalar_model import prompt_once_outputs, sequence_outputs

# Shortest prefix that judge prompts must share to be generated from one computation of it (prompt-once); a
# judge template's rubric alone is longer. Shorter shared prefixes are left alone: they would save little next
# to the extra forward and the cache copy (a judgement, not a measurement).
MIN_SHARED_PREFIX_TOKENS = 32


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def resolve_dtype(name: str, device: str):
    import torch

    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, name)


@dataclass
class TransformersScalarEngine:
    """A transformers sequence-classification model in this process. Prompt-once (the default) packs the whole
    batch into rows with no padding: every group of two or more inputs with its prompt computed once, and every
    single input, which has nothing to share, as its own causal sequence beside them. Without prompt-once,
    every input takes today's padded forwards (length groups of at most `max_padding_fraction` padding)."""

    model: torch.nn.Module
    pad_token_id: int
    max_padding_fraction: float
    max_tokens_per_forward: int
    prompt_once: bool = True

    def __post_init__(self):
        if self.prompt_once:
            packing.use_packed_attention(self.model)

    def raw_outputs(self, inputs: Sequence[Sequence[int]], groups: Sequence[Sequence[int]]) -> list[list[float]]:
        if not self.prompt_once:
            return sequence_outputs(self.model, inputs, self.pad_token_id, self.max_padding_fraction)
        outputs: list[list[float]] = [[] for _ in inputs]
        packed = prompt_once_outputs(
            self.model, [[inputs[i] for i in group] for group in groups], self.max_tokens_per_forward
        )
        for group, group_outputs in zip(groups, packed, strict=True):
            for index, values in zip(group, group_outputs, strict=True):
                outputs[index] = values
        return outputs


class TransformersGenerator:
    """Batched `generate` of a transformers causal LM, left-padded, in groups of similar prompt lengths. With
    `candidate_ids`, each step's raw logits are reduced to the candidates' log-probabilities as they come
    (CandidateRecorder), never kept whole: `output_logits` would hold steps x rows x vocabulary floats.

    Prompt-once (unless --no-prompt-once): prompts that share a prefix of at least MIN_SHARED_PREFIX_TOKENS
    (packing.prefix_groups: a GRPO group's judge prompts, same rubric and question) are generated from one
    computation of that prefix, through the model's generation cache; the others as before."""

    def __init__(self, config: JudgeConfig, tokenizer, candidate_ids: Sequence[int] = ()):
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor

        self._torch = torch
        self._config = config
        self._tokenizer = tokenizer
        self._candidate_ids = list(candidate_ids)
        self._device = resolve_device(config.device)
        vision = is_vision_model(config.model)
        model_class = AutoModelForImageTextToText if vision else AutoModelForCausalLM
        self._processor = AutoProcessor.from_pretrained(config.model) if vision else None
        self._model = (
            model_class.from_pretrained(config.model, torch_dtype=resolve_dtype(config.dtype, self._device))
            .to(self._device)
            .eval()
        )
        self._stop_ids = _stop_token_ids(self._model.generation_config, tokenizer)
        self._prompt_once = not config.no_prompt_once
        torch.manual_seed(config.seed)

    def generate(
        self, prompts: list[list[int]], images: Images | None = None, conversations: Sequence[list[dict]] = ()
    ) -> list[Generation]:
        """See engine.Generator; `conversations` is not needed in process."""
        shown = [i for i, prompt_images in enumerate(images or ()) if prompt_images]
        if not shown:
            return self._generate_text(prompts)
        results = [self._generate_with_images(prompts[i], images[i]) for i in shown]
        text_only = [i for i in range(len(prompts)) if i not in set(shown)]
        results += self._generate_text([prompts[i] for i in text_only])
        by_index = dict(zip(shown + text_only, results, strict=True))
        return [by_index[i] for i in range(len(prompts))]

    def _generate_with_images(self, prompt: list[int], images: Sequence[bytes]) -> Generation:
        """One prompt with images, alone: the processor expands each image token to the image's tokens and
        computes its pixels, from the prompt's text (one image token per image, as the chat template wrote it)."""
        text = self._tokenizer.decode(prompt, skip_special_tokens=False)
        inputs = self._processor(
            text=[text], images=[pil_images(images)], return_tensors="pt", add_special_tokens=False
        ).to(self._device)
        return self._generate_batch(inputs.pop("input_ids"), inputs.pop("attention_mask"), **inputs)[0]

    def _generate_text(self, prompts: list[list[int]]) -> list[Generation]:
        results: list[Generation | None] = [None] * len(prompts)
        each_alone = [[index] for index in range(len(prompts))]
        groups = packing.prefix_groups(prompts, MIN_SHARED_PREFIX_TOKENS) if self._prompt_once else each_alone
        alone = [group[0] for group in groups if len(group) == 1]
        for group in length_groups([len(prompts[i]) for i in alone], self._config.max_padding_fraction):
            rows = [alone[i] for i in group]
            for index, generation in zip(rows, self._generate_padded([prompts[i] for i in rows]), strict=True):
                results[index] = generation
        shared = [group for group in groups if len(group) > 1]
        for index, generation in self._generate_prompt_once(prompts, shared) if shared else []:
            results[index] = generation
        return results

    def _generate_padded(self, prompts: list[list[int]]) -> list[Generation]:
        batch = self._tokenizer.pad({"input_ids": prompts}, return_tensors="pt").to(self._device)
        return self._generate_batch(batch["input_ids"], batch["attention_mask"])

    def _generate_prompt_once(self, prompts: list[list[int]], groups: list[list[int]]) -> list[tuple[int, Generation]]:
        """The generations of groups of prompts that share a prefix: every group's prefix computed once, in one
        forward, and each of its prompts generated from that prefix's cache, its rest (the suffix) after it.
        A row of a generate call is laid out [pad, prefix, pad, suffix], the padding masked; generate takes
        positions from the mask (cumulative sum), so the suffix continues at its prefix's length."""
        prefixes = [prompts[group[0]][: packing.shared_prefix_length([prompts[i] for i in group])] for group in groups]
        prefix_ids, prefix_mask = self._left_padded(prefixes)
        cache = self._prefix_cache(prefix_ids, prefix_mask)
        rows = [(index, number) for number, group in enumerate(groups) for index in group]
        suffixes = [prompts[index][len(prefixes[number]) :] for index, number in rows]
        calls = length_groups([len(suffix) for suffix in suffixes], self._config.max_padding_fraction)
        generations = []
        for call in calls:
            owners = self._torch.tensor([rows[k][1] for k in call], device=self._device)
            with self._torch.inference_mode():
                call_cache = cache if len(calls) == 1 else copy.deepcopy(cache)
                call_cache.batch_select_indices(owners)  # each row the cache of its group's prefix
            suffix_ids, suffix_mask = self._left_padded([suffixes[k] for k in call])
            input_ids = self._torch.cat([prefix_ids[owners], suffix_ids], dim=1)
            attention_mask = self._torch.cat([prefix_mask[owners], suffix_mask], dim=1)
            batch = self._generate_batch(input_ids, attention_mask, call_cache)
            generations += [(rows[k][0], generation) for k, generation in zip(call, batch, strict=True)]
        return generations

    def _left_padded(self, sequences: list[list[int]]):
        batch = self._tokenizer.pad({"input_ids": sequences}, return_tensors="pt").to(self._device)
        return batch["input_ids"], batch["attention_mask"]

    def _prefix_cache(self, input_ids, attention_mask):
        """The model's cache of left-padded prefixes (computed outside CandidateRecorder: no generated step)."""
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        with self._torch.inference_mode():
            output = self._model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=True
            )
        return output.past_key_values

    def _generate_batch(self, input_ids, attention_mask, cache=None, **model_inputs) -> list[Generation]:
        """Generations of a left-padded batch; with `cache`, the model's cache of its first tokens; `model_inputs`:
        a vision model's pixels."""
        arguments = model_inputs if cache is None else {"past_key_values": cache, **model_inputs}
        with self._torch.inference_mode(), CandidateRecorder(self._model, self._candidate_ids) as recorder:
            output = self._model.generate(
                input_ids=input_ids, attention_mask=attention_mask, **arguments, **self._sampling_arguments()
            )
        new_tokens = output.sequences[:, input_ids.shape[1] :].tolist()
        logprobs = recorder.logprobs()
        return [self._generation(tokens, logprobs[row] if logprobs else []) for row, tokens in enumerate(new_tokens)]

    def _sampling_arguments(self) -> dict:
        config = self._config
        arguments = {
            "max_new_tokens": config.max_new_tokens,
            "pad_token_id": self._tokenizer.pad_token_id,
            "eos_token_id": sorted(self._stop_ids),
            "return_dict_in_generate": True,
        }
        if config.temperature > 0:
            return {**arguments, "do_sample": True, "temperature": config.temperature, "top_p": config.top_p}
        return {**arguments, "do_sample": False, "temperature": None, "top_p": None, "top_k": None}

    def _generation(self, tokens: list[int], logprobs: list[list[float]]) -> Generation:
        stop = next((i for i, token in enumerate(tokens) if token in self._stop_ids), None)
        kept = tokens if stop is None else tokens[:stop]
        return Generation(
            text=self._tokenizer.decode(kept, skip_special_tokens=True),
            token_ids=tuple(kept),
            hit_token_limit=stop is None,
            candidate_logprobs=tuple(tuple(step) for step in logprobs[: len(kept)]),
        )


class CandidateRecorder:
    """While in use, records at every forward of `model` (one per generated step) the log-softmax over the whole
    vocabulary of the last position's raw logits, at the `candidate_ids` columns only. A forward hook rather than
    a logits processor: generate runs custom processors after penalties from the model's generation config."""

    def __init__(self, model, candidate_ids: Sequence[int]):
        self._model = model
        self._candidate_ids = list(candidate_ids)
        self._steps = []
        self._hook = None
        self._columns = None  # the candidate ids as a tensor on the logits' device, made at the first step

    def __enter__(self) -> CandidateRecorder:
        if self._candidate_ids:
            self._hook = self._model.register_forward_hook(self._record)
        return self

    def __exit__(self, *exc) -> None:
        if self._hook is not None:
            self._hook.remove()

    def _record(self, module, args, output) -> None:
        import torch

        logits = output.logits[:, -1, :].float()
        if self._columns is None:
            self._columns = torch.tensor(self._candidate_ids, device=logits.device)
        self._steps.append(torch.log_softmax(logits, dim=-1)[:, self._columns])

    def logprobs(self) -> list[list[list[float]]]:
        """[row][step][candidate] log-probabilities; empty without candidates."""
        import torch

        return torch.stack(self._steps, dim=1).tolist() if self._steps else []


def _stop_token_ids(generation_config, tokenizer) -> set[int]:
    """The end-of-turn ids of the model's generation config and of the tokenizer."""
    configured = generation_config.eos_token_id
    ids = set(configured if isinstance(configured, list) else [configured] if configured is not None else [])
    ids.add(tokenizer.eos_token_id)
    return {i for i in ids if i is not None}
