"""A generative judge prompted by the user's own template (`--judge-template FILE`, judge_core/judge_template.py):
its messages rendered from each request (the rubric included), its answer read by the template's parser, the
score (N - low) / (high - low). On every backend of a generative judge: transformers, vLLM and openai."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from judge_core.judge_template import JudgeTemplate
from judge_models.config import JudgeConfig
from judge_models.engine import Generation

from .base import JudgeItem, Verdict
from .generative import ANSWER_EXCERPT_CHARS, GeneratingJudge

NO_ANSWER = "this judge's template reads a reference answer ({answer}); the request has no `answer`"
NO_RUBRIC = "this judge's template reads a rubric ({rubric}); the request has no `rubric`"
UNREAD_RUBRIC = "this judge's template has no {rubric}: the request's `rubric` would not reach it"


class TemplateJudge(GeneratingJudge):
    """Pointwise: the template's score of one completion."""

    def __init__(self, config: JudgeConfig, template: JudgeTemplate):
        if config.score_mode != "sample":
            raise ValueError(
                f"--judge-template {template.path}: the template's parser reads the generated score; serve it with "
                "--score-mode sample (expected scores need a judge trained on this project's templates)"
            )
        super().__init__(config, "generative", "score", (), reads_answer=template.reads_answer)
        self.template = template
        self.identity = dataclasses.replace(
            self.identity,
            reads_rubric=template.reads_rubric,
            scoring=f"score = (N - {template.low:g}) / ({template.high:g} - {template.low:g}), N read by the "
            f"{template.parser} {template.pattern!r} of {template.path}",
        )

    def input_messages(self, item: JudgeItem) -> list[dict]:
        return self.template.messages(item.prompt, item.completion, item.answer, item.rubric)

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """A verdict per item; an item without what the template reads (or with a rubric it does not) fails."""
        refusals = [self._refusal(item) for item in items]
        readable = [item for item, refusal in zip(items, refusals, strict=True) if refusal is None]
        results = iter(self._generate([self.input_messages(item) for item in readable]))
        verdicts = []
        for refusal in refusals:
            result = None if refusal else next(results)
            verdicts.append(Verdict.failed(refusal) if refusal else self._verdict(result))
        return verdicts

    def _refusal(self, item: JudgeItem) -> str | None:
        if self.template.reads_answer and not item.answer:
            return NO_ANSWER
        if self.template.reads_rubric and item.rubric is None:
            return NO_RUBRIC
        if not self.template.reads_rubric and item.rubric is not None:
            return UNREAD_RUBRIC
        return None

    def _verdict(self, result: Generation | Verdict) -> Verdict:
        if isinstance(result, Verdict):
            return result
        reading = self.template.read(result.text)
        if reading.error is not None:
            return self._failed(result, f"unparsable judge answer: {reading.error}")
        metadata = {"judge_score": reading.value, "generated_tokens": result.new_tokens, "score_mode": "sample"}
        return Verdict(reading.score, result.text[:ANSWER_EXCERPT_CHARS], metadata)
