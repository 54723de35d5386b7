"""Judging every completion of every row (in file order, chosen before rejected, in fixed batches) and
scoring the result."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from judge_core.settings import REQUIRED, option
from serving.judges import JudgeItem, Verdict
from serving.judges.base import ORDERS_AGREE

from .data import EvalRow
from .judges import EvaluationError, Group, JudgeBackend
from .scoring import (
    PositionConsistency,
    ScoredRow,
    SubsetResult,
    TieStats,
    chance_scores,
    overall_score,
    position_consistency,
    subset_results,
    tie_stats,
)

SCORE_FIELDS = ("score", "raw_reward")


@dataclass(frozen=True)
class EvaluationOptions:
    """What to evaluate, where the outputs go, and how the completions are ranked."""

    data: Path = option(REQUIRED, "parquet file in RewardBench 2's schema, e.g. OUT/eval/test.parquet")
    out: Path = option(REQUIRED, "directory for results.json, report.md and chart.png")
    batch_size: int = option(32, "completions per judge call")
    score_field: str = option(
        "score",
        "what ranks the completions: the judge's score in [0, 1], or a scalar judge's raw_reward "
        "(RewardBench 2 ranks classifiers by raw reward: the order is the same, the Ties margin "
        "terms differ)",
        choices=SCORE_FIELDS,
    )
    reference_column: str | None = option(
        None,
        "column of per-row reference answers sent to the judge as `answer` (offline eval: reference); default: none",
        metavar="NAME",
    )
    all_pairs: bool = option(
        False,
        "compare each row's completions with each other instead of judging each alone, every pair in both orders "
        "for a pairwise judge (POST /judge_group, schedule all_pairs): a completion's score is its mean win "
        "probability against its siblings, with no reference answer; position consistency then counts a completion "
        "whose every comparison agreed in both orders",
    )
    row_scores: bool = option(False, "also write every row's scores into results.json")
    chance_draws: int = option(100, "random judges averaged for the Ties chance level; best-of-N chance is exact")
    chance_seed: int = option(0, "seed of those random judges")

    def __post_init__(self):
        if self.batch_size < 1:
            raise ValueError("batch_size must be positive")
        if self.score_field not in SCORE_FIELDS:
            raise ValueError(f"score_field must be one of {SCORE_FIELDS}")
        if self.chance_draws < 1:
            raise ValueError("chance_draws must be positive")
        if self.all_pairs and self.reference_column:
            raise ValueError(
                "--all-pairs compares the completions with each other, with no reference: leave out --reference-column"
            )


@dataclass
class EvaluationResult:
    options: EvaluationOptions
    judge: dict
    judge_config: dict
    data_digest: str
    rows: list[ScoredRow]
    subsets: list[SubsetResult]
    chance: dict[str, float]  # subset -> chance level

    @property
    def score(self) -> float:
        return overall_score(self.subsets)

    @property
    def chance_mean(self) -> float:
        """The chance level of the unweighted mean (the mean of the subsets' chance levels)."""
        return sum(self.chance.values()) / len(self.chance)

    @property
    def failed_rows(self) -> int:
        return sum(row.failed for row in self.rows)

    @property
    def ties(self) -> TieStats:
        return tie_stats(self.rows)

    @property
    def position_consistency(self) -> PositionConsistency | None:
        return position_consistency(self.rows)

    def position_consistency_by_kind(self) -> dict[str, PositionConsistency | None]:
        """Over the correct and over the incorrect completions: with a correct reference answer as the other
        response, a correct completion's two responses are equally right, and only the incorrect ones have a
        right verdict."""
        return {
            kind: position_consistency(self.rows, correct)
            for kind, correct in (("correct", True), ("incorrect", False))
        }

    def failure_reasons(self) -> Counter:
        """Failed rows by the error of their first failed judgement."""
        return Counter(row.error for row in self.rows if row.failed)


def evaluate(
    rows: Sequence[EvalRow], backend: JudgeBackend, options: EvaluationOptions, judge_config: dict, data_digest: str
) -> EvaluationResult:
    if options.score_field == "raw_reward" and backend.identity["kind"] != "scalar":
        raise EvaluationError(f"--score-field raw_reward needs a scalar judge; this one is {backend.identity['kind']}")
    if options.all_pairs:
        scored = compare_rows(rows, backend, options.batch_size, options.score_field)
    else:
        check_reference_reaches_judge(options.reference_column, backend.identity)
        scored = judge_rows(rows, backend, options.batch_size, options.score_field)
    return EvaluationResult(
        options,
        backend.identity,
        judge_config,
        data_digest,
        scored,
        subset_results(scored),
        chance_scores(rows, options.chance_draws, options.chance_seed),
    )


def check_reference_reaches_judge(reference_column: str | None, identity: dict) -> None:
    """Refuses a reference the judge would ignore, and a judge that reads a reference none is given for: either
    way the scores would be those of a judge asked without the reference it was trained with."""
    reads = identity.get("reads_answer")
    judge = f"the {identity['kind']} judge {identity['model_id']}"
    if reference_column and reads is False:
        raise EvaluationError(
            f"--reference-column {reference_column}: {judge} ignores each request's reference answer; leave out "
            f"--reference-column (a generative judge trained with references reads it when served with "
            f"--reference-from-answer)"
        )
    if not reference_column and reads:
        raise EvaluationError(
            f"{judge} reads each request's reference answer, and none is given: name its column with --reference-column"
        )


def judge_rows(rows: Sequence[EvalRow], backend: JudgeBackend, batch_size: int, score_field: str) -> list[ScoredRow]:
    items = [
        JudgeItem(prompt=row.prompt, completion=completion, answer=row.reference)
        for row in rows
        for completion in row.completions
    ]
    verdicts = _in_batches(backend.score_batch, items, batch_size, backend.parallel_calls, "completions")
    scored, start = [], 0
    for row in rows:
        end = start + len(row.completions)
        scored.append(_scored_row(row, verdicts[start:end], score_field))
        start = end
    return scored


def compare_rows(rows: Sequence[EvalRow], backend: JudgeBackend, batch_size: int, score_field: str) -> list[ScoredRow]:
    """--all-pairs: each row's completions compared with each other, about batch_size completions per call."""
    if score_field != "score":
        raise EvaluationError("--all-pairs ranks by the mean win probability: leave --score-field at score")
    groups = [Group(row.prompt, tuple(row.completions)) for row in rows]
    per_call = max(1, batch_size // max(len(group.completions) for group in groups))
    outcomes = _in_batches(backend.compare_groups, groups, per_call, backend.parallel_calls, "rows")
    return [_scored_row(row, verdicts, score_field) for row, verdicts in zip(rows, outcomes, strict=True)]


def _in_batches(score: Callable[[list], list], items: list, batch_size: int, parallel_calls: int, unit: str) -> list:
    """score(batch) over the items' batches, `parallel_calls` at a time, the results in the items' order."""
    batches = [items[start : start + batch_size] for start in range(0, len(items), batch_size)]
    results: list = []
    with (
        tqdm(total=len(items), desc="judging", unit=f" {unit}") as progress,
        ThreadPoolExecutor(parallel_calls) as pool,
    ):
        for batch_results in pool.map(score, batches):  # map keeps the batches' order
            results.extend(batch_results)
            progress.update(len(batch_results))
    return results


def _scored_row(row: EvalRow, verdicts: Sequence[Verdict], score_field: str) -> ScoredRow:
    values = [_value(verdict, score_field) for verdict in verdicts]
    errors = [error for _, error in values if error is not None]
    agreement = _orders_agree(row, verdicts)
    if errors:
        return ScoredRow(row.id, row.subset, len(row.chosen), None, errors[0], agreement)
    return ScoredRow(row.id, row.subset, len(row.chosen), tuple(value for value, _ in values), None, agreement)


def _orders_agree(row: EvalRow, verdicts: Sequence[Verdict]) -> tuple[bool | None, ...]:
    """Per completion, whether both orders agreed; None where the verdict does not say (failed, or not pairwise)."""
    flags: list[bool | None] = []
    for number, verdict in enumerate(verdicts):
        if verdict.error is not None or ORDERS_AGREE not in verdict.metadata:
            flags.append(None)
            continue
        flag = verdict.metadata[ORDERS_AGREE]
        if not isinstance(flag, bool):
            raise EvaluationError(f"row {row.id} completion {number}: metadata {ORDERS_AGREE} is {flag!r}, not a bool")
        flags.append(flag)
    return tuple(flags)


def _value(verdict: Verdict, score_field: str) -> tuple[float | None, str | None]:
    """(the verdict's number to rank by, None), or (None, why there is none)."""
    if verdict.error is not None or verdict.score is None:
        return None, verdict.error or "the judge gave neither a score nor an error"
    value = verdict.score if score_field == "score" else verdict.metadata.get(score_field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None, f"the judge gave no finite {score_field} ({value!r})"
    return float(value), None
