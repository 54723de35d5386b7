"""The evaluation's outputs: results.json (every number, the config, optionally every row's scores),
report.md (one table: a line per subset and the mean) and chart.png (bars per subset, chance marked)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .data import is_ties_subset
from .run import EvaluationResult
from .scoring import PositionConsistency, TieStats, row_credit

RESULTS_FILE = "results.json"
REPORT_FILE = "report.md"
CHART_FILE = "chart.png"
SHOWN_FAILURE_REASONS = 10


def write_outputs(result: EvaluationResult) -> dict[str, Path]:
    """Write the three files under the output directory; their paths by kind."""
    out = result.options.out
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / RESULTS_FILE, "markdown": out / REPORT_FILE, "chart": out / CHART_FILE}
    paths["json"].write_text(json.dumps(results_json(result), indent=2) + "\n")
    paths["markdown"].write_text(markdown_report(result))
    draw_chart(result, paths["chart"])
    return paths


def results_json(result: EvaluationResult) -> dict:
    options = result.options
    document = {
        "score": result.score,
        "chance": result.chance_mean,
        "subsets": [_subset_json(subset, result.chance.get(subset.name)) for subset in result.subsets],
        "rows": len(result.rows),
        "failed_rows": result.failed_rows,
        "failure_reasons": dict(result.failure_reasons().most_common()),
        "tied_completions": _ties_json(result.ties),
        "position_consistency": _consistency_json(result),
        "judge": result.judge,
        "data": {"path": str(options.data), "sha256_12": result.data_digest},
        "config": {
            "evaluation": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(options).items()},
            "judge": result.judge_config,
        },
    }
    if options.row_scores:
        document["row_scores"] = [_row_json(row) for row in result.rows]
    return document


def _ties_json(ties: TieStats) -> dict:
    return {
        "share": ties.share,
        "completions": ties.completions,
        "tied": ties.tied_completions,
        "rows_with_ties_share": ties.rows_share,
        "rows": ties.rows,
        "rows_with_ties": ties.rows_with_ties,
    }


def _consistency_json(result: EvaluationResult) -> dict | None:
    if result.position_consistency is None:
        return None
    by_kind = result.position_consistency_by_kind()
    return {
        **_share_json(result.position_consistency),
        **{f"{kind}_completions": _share_json(part) for kind, part in by_kind.items()},
    }


def _share_json(consistency: PositionConsistency | None) -> dict | None:
    if consistency is None:
        return None
    return {"share": consistency.share, "completions": consistency.completions, "agreeing": consistency.agreeing}


def _subset_json(subset, chance: float | None) -> dict:
    document = {
        "name": subset.name,
        "score": subset.score,
        "chance": chance,
        "rows": subset.rows,
        "failed": subset.failed,
    }
    if subset.ties is not None:
        document["ties_components"] = dataclasses.asdict(subset.ties)
    return document


def _row_json(row) -> dict:
    document = {"id": row.id, "subset": row.subset, "scores": row.scores, "error": row.error}
    if not is_ties_subset(row.subset):
        document["credit"] = row_credit(row)
    return document


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def markdown_report(result: EvaluationResult) -> str:
    judge, options = result.judge, result.options
    lines = [
        "# RewardBench 2-style evaluation",
        "",
        f"- Judge: {judge['kind']} judge `{judge['model_id']}` (backend {judge['backend']}, version "
        f"{judge['model_version']}), {judge['access']}",
        f"- Data: `{options.data}` (sha256 {result.data_digest}, {len(result.rows)} rows)",
        f"- Ranked by: `{options.score_field}`; chance: the expected score of a judge scoring at random (1/N "
        f"per best-of-N row; Ties: {options.chance_draws} draws, seed {options.chance_seed})",
        f"- Failed rows: {result.failed_rows} of {len(result.rows)} (a row with a failed judgement scores as wrong)",
        *_tie_and_consistency_lines(result),
        "",
        "| Subset | Score | Chance | Rows | Failed |",
        "|---|---:|---:|---:|---:|",
    ]
    for subset in result.subsets:
        lines.append(
            f"| {subset.name} | {_percent(subset.score)} | {_percent(result.chance.get(subset.name))} "
            f"| {subset.rows} | {subset.failed} |"
        )
    lines.append(
        f"| **Mean** (unweighted) | **{_percent(result.score)}** | {_percent(result.chance_mean)} "
        f"| {len(result.rows)} | {result.failed_rows} |"
    )
    lines += _ties_lines(result) + _failure_lines(result)
    return "\n".join(lines) + "\n"


def _tie_and_consistency_lines(result: EvaluationResult) -> list[str]:
    ties = result.ties
    lines = [
        f"- Tied completions: {_percent(ties.share)}% of {ties.completions} share their score exactly with another "
        f"completion of their row; {_percent(ties.rows_share)}% of {ties.rows} rows have a tie (failed rows left out)"
    ]
    consistency = result.position_consistency
    if consistency is not None:
        by_kind = "; ".join(
            f"{_percent(part.share)}% of the {part.completions} {kind} ones"
            for kind, part in result.position_consistency_by_kind().items()
            if part is not None
        )
        lines.append(
            f"- Position consistency: {_percent(consistency.share)}% of {consistency.completions} judged "
            f"completions got the same verdict with the two responses swapped ({by_kind})"
        )
    return lines


def _ties_lines(result: EvaluationResult) -> list[str]:
    ties = next((subset.ties for subset in result.subsets if subset.ties is not None), None)
    if ties is None:
        return []
    return [
        "",
        f"Ties terms ({ties.paired_prompts} prompts with both a ref and a tied row): "
        f"tied accuracy {_percent(ties.tied_accuracy)}, ref accuracy {_percent(ties.ref_accuracy)}, "
        f"correctness preferred {_percent(ties.correctness_preferred)}, "
        f"correctness preferred (hard) {_percent(ties.correctness_preferred_hard)}, "
        f"margin score {ties.margin_score:.3f}.",
    ]


def _failure_lines(result: EvaluationResult) -> list[str]:
    reasons = result.failure_reasons()
    if not reasons:
        return []
    lines = ["", f"Failed rows by first error ({len(reasons)} distinct):", ""]
    lines += [f"- {count} x {reason}" for reason, count in reasons.most_common(SHOWN_FAILURE_REASONS)]
    return lines


def draw_chart(result: EvaluationResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [subset.name for subset in result.subsets] + ["Mean"]
    scores = [100 * subset.score for subset in result.subsets] + [100 * result.score]
    chances = [100 * result.chance[subset.name] for subset in result.subsets] + [100 * result.chance_mean]
    figure, axes = plt.subplots(figsize=(1.3 * len(names) + 2, 4.5))
    bars = axes.bar(names, scores, color=["tab:blue"] * (len(names) - 1) + ["tab:orange"])
    axes.bar_label(bars, fmt="%.1f")
    for position, chance in enumerate(chances):
        axes.hlines(
            chance,
            position - 0.4,
            position + 0.4,
            colors="black",
            linestyles="--",
            label="random chance" if position == 0 else None,
        )
    axes.set_ylim(min(0, *scores), 105)  # a Ties score can be slightly negative
    axes.set_ylabel("score (%)")
    axes.set_title(f"RewardBench 2-style evaluation: {result.judge['model_id']} ({result.failed_rows} failed rows)")
    axes.legend(loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
