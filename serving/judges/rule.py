"""Rule judge: the rule-based scorer of judge_core.rules, by answer type, against the request's answer."""

from __future__ import annotations

from collections.abc import Sequence

from judge_core import rules
from judge_models.config import JudgeConfig

from .base import Judge, JudgeIdentity, JudgeItem, Verdict


class RuleJudge(Judge):
    def __init__(self, config: JudgeConfig):
        self.identity = JudgeIdentity(
            kind="rule",
            backend="rules",
            model_id=config.model_id or "rules",
            model_version=config.model_version or "judge_core.rules",
            backend_reason="a rule judge runs no model",
            reads_answer=True,
        )

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return [self._score(item) for item in items]

    @staticmethod
    def _score(item: JudgeItem) -> Verdict:
        try:
            result = rules.score_answer(item.completion, item.answer, item.answer_type)
        except ValueError as err:  # no reference answer, unknown answer type, reference unfit for its type
            return Verdict.failed(f"rule judge cannot score this request: {err}")
        return Verdict(score=result.score, explanation=result.explanation, metadata={"answer_type": result.answer_type})
