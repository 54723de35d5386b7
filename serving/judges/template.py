"""Generative judges prompted by the user's own template (`--judge-template FILE`, judge_core/judge_template.py):
their messages rendered from each request (the rubric included), their answer read by the template's parser. A
pointwise template scores (N - low) / (high - low); a pairwise one compares two responses in both orders, as the
trained pairwise judge does (pairwise.py), its verdicts worth 1, 0 and a tie 0.5. On every backend of a generative
judge: transformers, vLLM and openai."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from judge_core.judge_template import VERDICT_WORTH, JudgeTemplate
from judge_core.protocol import templates
from judge_models.config import JudgeConfig
from judge_models.engine import Generation

from .base import ComparisonItem, JudgeItem, Verdict
from .generative import ANSWER_EXCERPT_CHARS, GeneratingJudge, judged_unless_refused
from .pairwise import PairwiseJudge

NO_ANSWER = "this judge's template reads a reference answer ({answer}); the request has no `answer`"
NO_RUBRIC = "this judge's template reads a rubric ({rubric}); the request has no `rubric`"
UNREAD_RUBRIC = "this judge's template has no {rubric}: the request's `rubric` would not reach it"
# The letters pairwise.py reads, by the index of the template's verdict: A better, B better, tie.
VERDICT_LETTERS = ("A", "B", templates.PAIRWISE_TIE)


def check_sample_mode(config: JudgeConfig, template: JudgeTemplate) -> None:
    if config.score_mode != "sample":
        raise ValueError(
            f"--judge-template {template.path}: the template's parser reads the generated answer; serve it with "
            "--score-mode sample (expected scores need a judge trained on this project's templates)"
        )


def rubric_refusal(template: JudgeTemplate, rubric: str | None) -> str | None:
    """Why a request's rubric (or its absence) cannot be judged by the template; None when it can."""
    if template.reads_rubric and rubric is None:
        return NO_RUBRIC
    if not template.reads_rubric and rubric is not None:
        return UNREAD_RUBRIC
    return None


def with_template(identity, template: JudgeTemplate, scoring: str):
    return dataclasses.replace(identity, reads_rubric=template.reads_rubric, scoring=scoring)


class TemplateJudge(GeneratingJudge):
    """Pointwise: the template's score of one completion."""

    def __init__(self, config: JudgeConfig, template: JudgeTemplate):
        check_sample_mode(config, template)
        super().__init__(config, "generative", "score", (), reads_answer=template.reads_answer)
        self.template = template
        self.identity = with_template(
            self.identity,
            template,
            f"score = (N - {template.low:g}) / ({template.high:g} - {template.low:g}), N read by the "
            f"{template.parser} {template.pattern!r} of {template.path}",
        )

    def input_messages(self, item: JudgeItem) -> list[dict]:
        prompt, images = self.split_images(item.prompt)
        return self.shown(self.template.messages(prompt, item.completion, item.answer, item.rubric), images)

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """A verdict per item; an item without what the template reads (or with a rubric it does not) fails."""
        return judged_unless_refused(items, self._judge, self._refusal)

    def _judge(self, items: list[JudgeItem]) -> list[Verdict]:
        return [self._verdict(result) for result in self._generate([self.input_messages(item) for item in items])]

    def _refusal(self, item: JudgeItem) -> str | None:
        if self.template.reads_answer and not item.answer:
            return NO_ANSWER
        return rubric_refusal(self.template, item.rubric)

    def _verdict(self, result: Generation | Verdict) -> Verdict:
        if isinstance(result, Verdict):
            return result
        reading = self.template.read(result.text)
        if reading.error is not None:
            return self._failed(result, f"unparsable judge answer: {reading.error}")
        metadata = {"judge_score": reading.value, "generated_tokens": result.new_tokens, "score_mode": "sample"}
        return Verdict(reading.score, result.text[:ANSWER_EXCERPT_CHARS], metadata)


class PairwiseTemplateJudge(PairwiseJudge):
    """Pairwise: which of two responses the template's verdict prefers, in both orders. /judge compares the
    completion with the reference `answer`, /compare and /judge_group response_a with response_b."""

    def __init__(self, config: JudgeConfig, template: JudgeTemplate):
        check_sample_mode(config, template)
        self.template = template
        super().__init__(config, ties=len(template.verdicts) == len(VERDICT_LETTERS))
        worth = ", ".join(f"{v!r} {w:g}" for v, w in zip(template.verdicts, VERDICT_WORTH, strict=False))
        self.identity = with_template(
            self.identity,
            template,
            f"score = P(the first response is better) over both orders, the {template.parser} {template.pattern!r} "
            f"of {template.path} read as {worth}",
        )

    def pair_messages(self, prompt, response_a: str, response_b: str, rubric: str | None) -> list[dict]:
        return self.template.pair_messages(prompt, response_a, response_b, rubric)

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return judged_unless_refused(items, super().score_batch, self._refusal)

    def compare_batch(self, items: Sequence[ComparisonItem]) -> list[Verdict]:
        return judged_unless_refused(items, super().compare_batch, self._refusal)

    def _refusal(self, item: JudgeItem | ComparisonItem) -> str | None:
        return rubric_refusal(self.template, item.rubric)  # an item without a reference: PairwiseJudge refuses it

    def _parse(self, text: str) -> templates.Judgement:
        reading = self.template.read(text)
        if reading.error is not None:
            return templates.Judgement(None, reading.error)
        return templates.Judgement(VERDICT_LETTERS[self.template.verdicts.index(reading.value)], reasoning=text)
