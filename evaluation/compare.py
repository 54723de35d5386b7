"""Is one judge better than another on the same rows? `python -m evaluation.compare BASE OTHER [--data FILE]`.

BASE and OTHER are two `python -m evaluation --row-scores` outputs (their folders or results.json files) on the
same data. It prints each subset's score for both, OTHER - BASE, and a paired bootstrap interval of that
difference: each draw resamples the rows of every subset with replacement, the same rows for both judges, and
recomputes the score as the evaluation does (each subset's mean credit, then the unweighted mean of the
subsets). With `--data` (the evaluated parquet), the rows of one `additional_metadata.fact` (data_prep offline's;
`--val-rows-per-fact` asks a fact several times) are drawn together, since they are not independent draws of the
task. It also prints the share of draws in which OTHER does not beat BASE.

Ties subsets are refused: their score is not a mean of row credits.
"""

from __future__ import annotations

import dataclasses
import json
import random
import statistics
from pathlib import Path

from judge_core.settings import REQUIRED, option, parse_configs

from .data import is_ties_subset

RESULTS = "results.json"


@dataclasses.dataclass
class CompareConfig:
    base: str = option(REQUIRED, "the reference judge's evaluation (folder or results.json)", positional=True)
    other: str = option(REQUIRED, "the judge compared with it, on the same data", positional=True)
    data: str | None = option(None, "the evaluated parquet: rows sharing additional_metadata.fact are drawn together")
    draws: int = option(10000, "bootstrap draws")
    level: float = option(0.9, "coverage of the interval printed")
    seed: int = option(0, "seed of the draws")

    def __post_init__(self):
        if self.draws < 100:
            raise ValueError(f"--draws must be at least 100, not {self.draws}")
        if not 0 < self.level < 1:
            raise ValueError(f"--level must be between 0 and 1, not {self.level}")


@dataclasses.dataclass(frozen=True)
class RowCredits:
    """One evaluation's credit per row id, with the row's subset."""

    path: Path
    score: float
    credits: dict[str, float]
    subsets: dict[str, str]


def read_credits(location: str | Path) -> RowCredits:
    path = Path(location)
    path = path / RESULTS if path.is_dir() else path
    if not path.is_file():
        raise ValueError(f"{path}: no such file (a python -m evaluation output folder, or its {RESULTS})")
    document = json.loads(path.read_text())
    rows = document.get("row_scores")
    if not rows:
        raise ValueError(f"{path}: no row_scores; evaluate with --row-scores")
    ties = sorted({row["subset"] for row in rows if is_ties_subset(row["subset"])})
    if ties:
        raise ValueError(f"{path}: Ties subsets cannot be compared row by row: {', '.join(ties)}")
    credits = {row["id"]: float(row["credit"]) for row in rows}
    return RowCredits(path, float(document["score"]), credits, {row["id"]: row["subset"] for row in rows})


def check_same_rows(base: RowCredits, other: RowCredits) -> None:
    if base.subsets != other.subsets:
        only = sorted(set(base.subsets) ^ set(other.subsets))
        detail = f"ids in one only: {only[:3]}" if only else "the same ids in other subsets"
        raise ValueError(f"{base.path} and {other.path} did not evaluate the same rows ({detail})")


def read_groups(data: str | None, ids: list[str]) -> dict[str, str]:
    """Each row id's group: its additional_metadata.fact where --data gives one, else the row alone."""
    if data is None:
        return {row_id: row_id for row_id in ids}
    import pyarrow.parquet as pq

    table = pq.read_table(data, columns=["id", "subset", "additional_metadata"]).to_pylist()
    facts = {row["id"]: (row.get("additional_metadata") or {}).get("fact") for row in table}
    missing = sorted(set(ids) - set(facts))
    if missing:
        raise ValueError(f"{data}: not the evaluated file, it lacks row ids {missing[:3]}")
    return {row_id: f"fact {facts[row_id]}" if facts[row_id] else row_id for row_id in ids}


@dataclasses.dataclass(frozen=True)
class Difference:
    name: str
    rows: int
    groups: int
    base: float
    other: float
    low: float
    high: float
    not_better: float  # share of draws where OTHER - BASE <= 0

    @property
    def difference(self) -> float:
        return self.other - self.base


def compare(base: RowCredits, other: RowCredits, groups: dict[str, str], config: CompareConfig) -> list[Difference]:
    """Per subset, then the overall score (unweighted mean of subsets): the observed scores and the bootstrap of
    their difference, groups of rows resampled within each subset."""
    rng = random.Random(config.seed)
    results, draws = [], []
    for subset in dict.fromkeys(base.subsets.values()):
        members: dict[str, list[str]] = {}
        for row_id, name in base.subsets.items():
            if name == subset:
                members.setdefault(groups[row_id], []).append(row_id)
        # per group: (rows, BASE's credits, OTHER's credits)
        totals = [
            (len(ids), sum(base.credits[i] for i in ids), sum(other.credits[i] for i in ids))
            for ids in members.values()
        ]
        differences = [_difference_of(rng.choices(totals, k=len(totals))) for _ in range(config.draws)]
        draws.append(differences)
        rows, base_sum, other_sum = (sum(column) for column in zip(*totals, strict=True))
        results.append(_difference(subset, rows, len(totals), base_sum / rows, other_sum / rows, differences, config))
    scores = [statistics.fmean(getattr(result, run) for result in results) for run in ("base", "other")]
    for run, score in zip((base, other), scores, strict=True):
        if abs(run.score - score) > 1e-9:
            raise ValueError(f"{run.path}: its row credits give {score:.6f}, not its score {run.score:.6f}")
    overall = [statistics.fmean(subset_draws) for subset_draws in zip(*draws, strict=True)]
    groups_drawn = sum(result.groups for result in results)
    results.append(_difference("Mean", len(base.subsets), groups_drawn, *scores, overall, config))
    return results


def _difference_of(drawn: list[tuple[int, float, float]]) -> float:
    rows = sum(size for size, _, _ in drawn)
    return (sum(other for _, _, other in drawn) - sum(base for _, base, _ in drawn)) / rows


def _difference(
    name: str, rows: int, groups: int, base: float, other: float, differences: list[float], config: CompareConfig
) -> Difference:
    ordered = sorted(differences)
    low, high = (ordered[round(q * (len(ordered) - 1))] for q in ((1 - config.level) / 2, (1 + config.level) / 2))
    not_better = sum(difference <= 0 for difference in differences) / len(differences)
    return Difference(name, rows, groups, base, other, low, high, not_better)


def report(results: list[Difference], base: RowCredits, other: RowCredits, config: CompareConfig) -> str:
    facts = config.data is not None
    level = f"{config.level:.0%} interval"
    lines = [
        f"BASE {base.path}",
        f"OTHER {other.path}",
        "",
        f"| subset | rows |{' facts |' if facts else ''} BASE | OTHER | OTHER - BASE | {level} | P(OTHER <= BASE) |",
        f"|---|---:|{'---:|' if facts else ''}---:|---:|---:|---|---:|",
    ]
    for r in results:
        name = f"**{r.name}** (unweighted)" if r.name == "Mean" else r.name
        lines.append(
            f"| {name} | {r.rows} |{f' {r.groups} |' if facts else ''} {100 * r.base:.1f} | {100 * r.other:.1f} | "
            f"{100 * r.difference:+.1f} | {100 * r.low:+.1f} to {100 * r.high:+.1f} | {r.not_better:.3f} |"
        )
    drawn = "facts (the rows of each drawn together)" if facts else "rows"
    lines += ["", f"{config.draws} paired draws, seed {config.seed}: {drawn} resampled within each subset."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    (config,) = parse_configs("python -m evaluation.compare", __doc__, [CompareConfig], argv)
    try:
        base, other = read_credits(config.base), read_credits(config.other)
        check_same_rows(base, other)
        results = compare(base, other, read_groups(config.data, list(base.subsets)), config)
    except (OSError, ValueError, KeyError) as err:
        raise SystemExit(f"compare: {err}") from None
    print(report(results, base, other, config))


if __name__ == "__main__":
    main()
