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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from judge_core.protocol import content, templates
from judge_models.config import JudgeConfig
from judge_models.engine import Generation, GenerationFailure, Generator, is_vision_model

from . import hf
from .base import Judge, JudgeItem, Verdict

# How much of an unparsable answer an error carries back, for debugging the judge.
ANSWER_EXCERPT_CHARS = 500
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
        self.reads_images = is_vision_model(config.model)
        self.identity = replace(hf.identity(config, kind, reads_answer=reads_answer), reads_images=self.reads_images)
        self._tokenizer = hf.load_tokenizer(config.model, padding_side="left")
        self._values = AnswerValues(self._tokenizer, tag, values) if config.score_mode == "expected" else None
        self.computes_shared_prompts_once = config.shares_prompts
        self._generator = _make_generator(config, self._tokenizer, self.candidate_ids)

    @property
    def candidate_ids(self) -> tuple[int, ...]:
        """The answer values' tokens whose log-probabilities expected mode reads (none in sample mode)."""
        return self._values.token_ids if self._values else ()

    def split_images(self, prompt: templates.Conversation) -> tuple[templates.Conversation, list[str]]:
        """A vision judge's prompt with its images marked in the text (`[image k]`), and the images; any other
        judge's prompt as it is (its template refuses an image rather than lose it)."""
        if not self.reads_images or isinstance(prompt, str):
            return prompt, []
        return content.marked(templates.as_messages(prompt))

    @staticmethod
    def shown(messages: list[dict], images: Sequence[str]) -> list[dict]:
        """A judge prompt with the images of the prompt it judges (split_images) beside its text."""
        return content.attach(messages, images) if images else messages

    def prompt_token_ids(self, conversations: Sequence[list[dict]]) -> tuple[list, list]:
        """Each conversation's judge prompt as the engine reads it (token ids; one image token per image), or the
        verdict refusing it."""
        texts = [
            self._tokenizer.apply_chat_template(_template_parts(messages), tokenize=False, add_generation_prompt=True)
            for messages in conversations
        ]
        return hf.encode_checked(self._tokenizer, texts, self._config.max_input_tokens)

    def _generate(self, conversations: Sequence[list[dict]]) -> list[Generation | Verdict]:
        """One generation per conversation, in order; an error verdict for one too long to judge."""
        if not conversations:  # e.g. a pairwise batch whose items all lack a reference
            return []
        encodings, verdicts = self.prompt_token_ids(conversations)
        results: list[Generation | Verdict] = list(verdicts)
        readable = [i for i, verdict in enumerate(verdicts) if verdict is None]
        images = [[content.image_bytes(url, where) for where, url in content.image_urls(c)] for c in conversations]
        prompts = [encodings[i] for i in readable]
        if any(images):  # an engine elsewhere reads a vision judge's images from its conversation
            arguments = (
                {"conversations": [conversations[i] for i in readable]} if self._config.backend == "openai" else {}
            )
            generations = self._generator.generate(prompts, [images[i] for i in readable], **arguments)
        else:
            generations = self._generator.generate(prompts)
        for index, generation in zip(readable, generations, strict=True):
            results[index] = (
                Verdict.failed(generation.error) if isinstance(generation, GenerationFailure) else generation
            )
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
        return judged_unless_refused(items, judge, lambda item: None if item.answer else missing)

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
        prompt, images = self.split_images(item.prompt)
        return self.shown(templates.pointwise_messages(prompt, item.completion, reference=reference), images)

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """A verdict per item; with --reference-from-answer an item without an answer is an error, not a
        judgement made without the reference the judge was trained with."""
        if self._config.reference_from_answer:
            return self._with_answers_only(items, self._judge, NO_REFERENCE)
        return self._judge(items)

    def _judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return self.read_generations(items, self._generate(self.conversations(items)))

    def conversations(self, items: Sequence[JudgeItem]) -> list[list[dict]]:
        """The judge prompts of `items` (one each), in order: what the engine generates from."""
        return [self.input_messages(item) for item in items]

    def read_generations(self, items: Sequence[JudgeItem], results: Sequence) -> list[Verdict]:
        """The items' verdicts from the generations of their `conversations` (or a verdict refusing one)."""
        return [result if isinstance(result, Verdict) else self.verdict(result) for result in results]

    def verdict(self, generation: Generation) -> Verdict:
        """The judgement one generation gives."""
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


def judged_unless_refused(items: Sequence, judge: Callable[[list], list[Verdict]], refusal: Callable) -> list[Verdict]:
    """`judge`'s verdicts for the items `refusal` finds nothing wrong with, in the items' order; the others fail
    with what `refusal` says."""
    reasons = [refusal(item) for item in items]
    accepted = [i for i, reason in enumerate(reasons) if reason is None]
    verdicts = [Verdict.failed(reason) if reason else None for reason in reasons]
    for index, verdict in zip(accepted, judge([items[i] for i in accepted]) if accepted else [], strict=True):
        verdicts[index] = verdict
    return verdicts


def _template_parts(messages: list[dict]) -> list[dict]:
    """A vision model's chat template places an image where a part says {"type": "image"}."""
    return [
        {**m, "content": [{"type": "image"} if p["type"] == content.IMAGE else p for p in m["content"]]}
        if content.is_parts(m["content"])
        else m
        for m in messages
    ]


def _make_generator(config: JudgeConfig, tokenizer, candidate_ids: Sequence[int]) -> Generator:
    if config.backend == "openai":
        from judge_models.openai_engine import OpenAIGenerator, check_engine

        check_engine(config, needs_logprobs=bool(candidate_ids))
        return OpenAIGenerator(config, candidate_ids)
    if config.backend == "vllm":
        from judge_models.vllm_engine import VllmGenerator  # imported once vLLM is chosen

        return VllmGenerator(config, candidate_ids)
    from judge_models.transformers_engine import TransformersGenerator

    return TransformersGenerator(config, tokenizer, candidate_ids)
