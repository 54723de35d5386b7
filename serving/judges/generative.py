"""Generative judges: a causal LM answers a template of judge_core.protocol.templates with `<think>..</think>`
and an answer tag, parsed strictly (an unparsable answer is an error, not a 0).

The pointwise judge (`<score>N</score>`) lives here, the pairwise one (`<better>A|B</better>`) in pairwise.py;
both share `GeneratingJudge`: one batched generation path and one reader of answer values.

With --score-mode expected (the default) the generation also carries, for each generated step, the
log-probabilities of the answer values' tokens: a softmax of the model's raw logits (temperature 1, before any
sampling setting). The step that writes the parsed answer's value gives the judge's probability of every value
there. With --score-mode sample only the generated value counts.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from judge_core.protocol import templates
from judge_models import packing
from judge_models.padding import length_groups

from ..config import JudgeConfig
from . import hf
from .base import Judge, JudgeItem, Verdict
from .generation import Generation, Generator

# How much of an unparsable answer an error carries back, for debugging the judge.
ANSWER_EXCERPT_CHARS = 500
# Shortest prefix that judge prompts must share to be generated from one computation of it (prompt-once); a
# judge template's rubric alone is longer. Shorter shared prefixes are left alone: they would save little next
# to the extra forward and the cache copy (a judgement, not a measurement).
MIN_SHARED_PREFIX_TOKENS = 32
NO_REFERENCE = "this judge reads a reference answer (--reference-from-answer); the request has no `answer`"


@dataclass(frozen=True)
class Answer:
    """A parsed judge answer; in expected mode also the judge's probability of each value at the value's step,
    renormalized over the values (`probabilities`), and their total before renormalizing (`mass`)."""

    value: int | str
    reasoning: str
    generated_tokens: int
    probabilities: dict[str, float] | None = None
    mass: float | None = None


class AnswerValues:
    """The values an answer tag can hold, each one token of the judge's tokenizer right after the tag's opening,
    and where a generation writes its value."""

    def __init__(self, tokenizer, tag: str, values: Sequence[str]):
        self._tokenizer = tokenizer
        self.tag = tag
        self.values = tuple(values)
        self.token_ids = tuple(_value_token_id(tokenizer, tag, value) for value in self.values)

    def probabilities(self, generation: Generation, value: str) -> tuple[dict[str, float], float]:
        """The judge's probability of each value at the step that writes `value` (of the parsed answer
        `generation.text`), renormalized over the values, and their total before. ValueError when that step
        cannot be told exactly."""
        step = self._value_step(generation, templates.answer_value_offset(generation.text, self.tag))
        if step is None:
            raise ValueError(f"the <{self.tag}> value {value!r} does not start at a generated token's boundary")
        if generation.token_ids[step] != self.token_ids[self.values.index(value)]:
            token = self._tokenizer.decode([generation.token_ids[step]])
            raise ValueError(f"the generated token {token!r} that starts the <{self.tag}> value is not just {value!r}")
        logprobs = generation.candidate_logprobs[step]
        top = max(logprobs)  # finite: the generated token is one of the candidates
        weights = [math.exp(logprob - top) for logprob in logprobs]
        total = sum(weights)
        probabilities = {v: weight / total for v, weight in zip(self.values, weights, strict=True)}
        return probabilities, math.exp(top) * total

    def _value_step(self, generation: Generation, offset: int) -> int | None:
        """The generated step whose token starts the text at character `offset`: the last k for which the
        tokens before k decode to exactly the text before `offset` (None if no k does)."""
        prefix, tokens = generation.text[:offset], generation.token_ids
        for step in range(len(tokens) - 1, -1, -1):
            decoded = self._tokenizer.decode(tokens[:step], skip_special_tokens=True)
            if decoded == prefix:
                return step
            if len(decoded) < offset:  # decoded prefixes only grow with k: no earlier k can match
                return None
        return None


def _value_token_id(tokenizer, tag: str, value: str) -> int:
    """The one token `value` is encoded as right after `<tag>`; ValueError naming the value if it is not one."""
    opening = tokenizer(f"<{tag}>", add_special_tokens=False)["input_ids"]
    with_value = tokenizer(f"<{tag}>{value}", add_special_tokens=False)["input_ids"]
    if len(with_value) != len(opening) + 1 or with_value[: len(opening)] != opening:
        raise ValueError(
            f"the judge's tokenizer does not write the answer value {value!r} as one token after <{tag}>, so "
            "--score-mode expected cannot read the judge's probability of it; use --score-mode sample"
        )
    return with_value[-1]


class GeneratingJudge(Judge):
    """What generative judges share: prompts through the chat template, one batched generation, and reading
    an answer (its value, and in expected mode the judge's probabilities of the values)."""

    def __init__(self, config: JudgeConfig, kind: str, tag: str, values: Sequence[str], reads_answer: bool):
        self._config = config
        self.identity = hf.identity(config, kind, reads_answer=reads_answer)
        self._tokenizer = hf.load_tokenizer(config.model, padding_side="left")
        self._values = AnswerValues(self._tokenizer, tag, values) if config.score_mode == "expected" else None
        self.computes_shared_prompts_once = config.shares_prompts
        self._generator = _make_generator(config, self._tokenizer, self._values.token_ids if self._values else ())

    def _generate(self, conversations: Sequence[list[dict]]) -> list[Generation | Verdict]:
        """One generation per conversation, in order; an error verdict for one too long to judge."""
        if not conversations:  # e.g. a pairwise batch whose items all lack a reference
            return []
        texts = [
            self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            for messages in conversations
        ]
        encodings, verdicts = hf.encode_checked(self._tokenizer, texts, self._config.max_input_tokens)
        results: list[Generation | Verdict] = list(verdicts)
        readable = [i for i, verdict in enumerate(verdicts) if verdict is None]
        for index, generation in zip(readable, self._generator.generate([encodings[i] for i in readable]), strict=True):
            results[index] = generation
        return results

    def _read(self, generation: Generation, parse: Callable[[str], templates.Judgement]) -> Answer | Verdict:
        """The answer `parse` finds in `generation`, with its values' probabilities in expected mode; else an
        error verdict that says why."""
        judgement = parse(generation.text)
        if not judgement.ok:
            cut = (
                f" (generation stopped at --max-new-tokens {self._config.max_new_tokens})"
                if generation.hit_token_limit
                else ""
            )
            return self._failed(generation, f"unparsable judge answer: {judgement.error}{cut}")
        answer = Answer(judgement.value, (judgement.reasoning or "").strip(), generation.new_tokens)
        if self._values is None:
            return answer
        try:
            probabilities, mass = self._values.probabilities(generation, str(judgement.value))
        except ValueError as err:
            return self._failed(generation, f"cannot read the judge's probabilities of its answer: {err}")
        return replace(answer, probabilities=probabilities, mass=mass)

    @staticmethod
    def _with_answers_only(
        items: Sequence[JudgeItem], judge: Callable[[list[JudgeItem]], list[Verdict]], missing: str
    ) -> list[Verdict]:
        """`judge`'s verdicts for the items that carry a reference `answer`, in the items' order; the others
        fail with `missing`."""
        with_answer = [i for i, item in enumerate(items) if item.answer]
        verdicts = [Verdict.failed(missing) for _ in items]
        for index, verdict in zip(with_answer, judge([items[i] for i in with_answer]), strict=True):
            verdicts[index] = verdict
        return verdicts

    def _failed(self, generation: Generation, error: str) -> Verdict:
        return Verdict.failed(
            error, judge_output=generation.text[:ANSWER_EXCERPT_CHARS], generated_tokens=generation.new_tokens
        )


class GenerativeJudge(GeneratingJudge):
    """The pointwise judge: `<score>N</score>`, N in 0..4. Sample mode: score N/4. Expected mode: the mean of
    d/4 over the judge's probabilities of the five scores d at the step that writes N."""

    def __init__(self, config: JudgeConfig):
        super().__init__(
            config, "generative", templates.POINTWISE_TAG, templates.POINTWISE_VALUES, config.reference_from_answer
        )

    def input_messages(self, item: JudgeItem) -> list[dict]:
        reference = item.answer if self._config.reference_from_answer else None
        return templates.pointwise_messages(item.prompt, item.completion, reference=reference)

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """A verdict per item; with --reference-from-answer an item without an answer is an error, not a
        judgement made without the reference the judge was trained with."""
        if self._config.reference_from_answer:
            return self._with_answers_only(items, self._judge, NO_REFERENCE)
        return self._judge(items)

    def _judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        results = self._generate([self.input_messages(item) for item in items])
        return [result if isinstance(result, Verdict) else self._verdict(result) for result in results]

    def _verdict(self, generation: Generation) -> Verdict:
        answer = self._read(generation, templates.parse_pointwise)
        if isinstance(answer, Verdict):
            return answer
        metadata = {
            "judge_score": answer.value,
            "generated_tokens": answer.generated_tokens,
            "score_mode": self._config.score_mode,
        }
        if answer.probabilities is None:
            return Verdict(templates.normalized_score(answer.value), answer.reasoning, metadata)
        score = sum(p * templates.normalized_score(int(value)) for value, p in answer.probabilities.items())
        expected = {
            "score_probabilities": answer.probabilities,
            "confidence": max(answer.probabilities.values()),
            "score_mass": answer.mass,
        }
        return Verdict(score, answer.reasoning, {**metadata, **expected})


def _make_generator(config: JudgeConfig, tokenizer, candidate_ids: Sequence[int]) -> Generator:
    if config.backend == "vllm":
        # vllm_backend imports only generation.py, never this module; this import runs once vLLM is chosen.
        from .vllm_backend import VllmGenerator

        return VllmGenerator(config, candidate_ids)
    return TransformersGenerator(config, tokenizer, candidate_ids)


class TransformersGenerator:
    """Batched `generate` of a transformers causal LM, left-padded, in groups of similar prompt lengths. With
    `candidate_ids`, each step's raw logits are reduced to the candidates' log-probabilities as they come
    (CandidateRecorder), never kept whole: `output_logits` would hold steps x rows x vocabulary floats.

    Prompt-once (unless --no-prompt-once): prompts that share a prefix of at least MIN_SHARED_PREFIX_TOKENS
    (packing.prefix_groups: a GRPO group's judge prompts, same rubric and question) are generated from one
    computation of that prefix, through the model's generation cache; the others as before."""

    def __init__(self, config: JudgeConfig, tokenizer, candidate_ids: Sequence[int] = ()):
        import torch
        from transformers import AutoModelForCausalLM

        self._torch = torch
        self._config = config
        self._tokenizer = tokenizer
        self._candidate_ids = list(candidate_ids)
        self._device = hf.resolve_device(config.device)
        self._model = (
            AutoModelForCausalLM.from_pretrained(config.model, torch_dtype=hf.resolve_dtype(config.dtype, self._device))
            .to(self._device)
            .eval()
        )
        self._stop_ids = _stop_token_ids(self._model.generation_config, tokenizer)
        self._prompt_once = not config.no_prompt_once
        torch.manual_seed(config.seed)

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
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

    def _generate_batch(self, input_ids, attention_mask, cache=None) -> list[Generation]:
        """Generations of a left-padded batch; with `cache`, the model's cache of its first tokens."""
        arguments = {} if cache is None else {"past_key_values": cache}
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
