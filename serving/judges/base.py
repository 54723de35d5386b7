"""What every judge is: a function from a batch of judge items to one verdict per item, in order."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from judge_core.protocol.judge_api import ComparisonItem, JudgeItem  # noqa: F401 (re-exported)

# Verdict metadata of a judge that judged both orders of a pair (pairwise generative): whether the two agreed.
ORDERS_AGREE = "orders_agree"


@dataclass
class Verdict:
    """A judge's answer for one item: a score in [0, 1], or an error and no score."""

    score: float | None
    explanation: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    detailed_scores: dict[str, float] | None = None
    error: str | None = None

    @classmethod
    def failed(cls, error: str, **metadata: Any) -> Verdict:
        return cls(score=None, error=error, metadata=metadata)


@dataclass(frozen=True)
class JudgeIdentity:
    """What /health and every response say about the judge."""

    kind: str
    backend: str
    model_id: str
    model_version: str
    backend_reason: str = ""  # why this backend runs (--backend, or what --backend auto found)
    scoring: str = ""  # what the score is, where the kind alone does not say it
    tokenization: str = ""  # how the judge input is tokenized, its BOS included
    reads_answer: bool = False  # whether a request's `answer` reaches the judge; when False it is ignored
    reads_rubric: bool = False  # whether every request must carry a `rubric`, which reaches the judge; else refused
    reads_images: bool = False  # whether a prompt's images reach the judge; else refused, or dropped (--drop-images)


class ComparisonUnsupported(ValueError):
    """This judge cannot tell which of two responses is better (/compare answers 4xx)."""


class Judge(abc.ABC):
    """A loaded judge. `score_batch` runs on the model worker thread only, never on the event loop."""

    identity: JudgeIdentity
    computes_shared_prompts_once = False  # whether items that share a prompt cost less in one batch

    @abc.abstractmethod
    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """One verdict per item, in the order of `items`."""

    def compare_batch(self, items: Sequence[ComparisonItem]) -> list[Verdict]:
        """One verdict per comparison, in order: its score is the probability that response_a is better."""
        raise ComparisonUnsupported(f"a {self.identity.kind} judge cannot compare two responses")

    @property
    def can_compare(self) -> bool:
        """Whether this judge answers /compare: its class implements compare_batch."""
        return type(self).compare_batch is not Judge.compare_batch
