"""A judge's learning curves from its evaluations: `python -m evaluation.judge_curves RUN [RUN ...] --out OUT`.

RUN is a folder of `python -m evaluation` outputs, one per checkpoint, each named `step<N>` (evaluate the export of
step N with `--out RUN/step<N>`; step0 for the model the run started from). Several RUNs are the same settings with
other seeds. `--metrics` gives one verl metrics file per RUN (`trainer.logger=[console,file]`: the launcher writes
`<save folder>/launch/metrics.jsonl`), and `--metric` the key drawn from it (`val/loss` by default). `--validation`
gives one verl validation folder per RUN (a GRPO judge's `trainer.validation_data_dir`; evaluation/verl_validation.py):
its accuracy, format failures and position consistency per validation step.

It prints, per step and run, whether the judge read a reference answer (results.json: the evaluation's
--reference-column, reaching a judge that reads answers), the score against its chance level, the position
consistency (pairwise judges evaluated in both orders), the failed rows and the metric at that step, then the verl
validations, and writes judge_curves.png: the score with chance dashed, the position consistency (of both kinds of
evaluation; only when a run was evaluated in both orders), the metric and the verl validation accuracy, each against
the step; with several runs their mean and range. matplotlib comes with the `eval` extra.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

from judge_core.settings import REQUIRED, option, parse_configs

from .reward_plots import plot_runs, save_figure
from .verl_validation import ValidationPoint, read_validation

OUTPUT = "judge_curves.png"
STEP_FOLDER = re.compile(r"step(\d+)")


@dataclasses.dataclass
class JudgeCurvesConfig:
    runs: list[str] = option(
        REQUIRED, "folders of evaluations named step<N> (python -m evaluation --out RUN/step<N>)", positional=True
    )
    metrics: list[str] | None = option(None, "verl metrics.jsonl files, one per RUN in their order")
    metric: str = option("val/loss", "the key of the metrics files drawn against the step")
    validation: list[str] | None = option(
        None, "verl validation folders (trainer.validation_data_dir), one per RUN in their order"
    )
    out: str = option("judge_curves", "folder the PNG is written to")


@dataclasses.dataclass(frozen=True)
class Point:
    score: float
    chance: float
    position_consistency: float  # NaN: not evaluated in both orders
    failed_rows: int
    rows: int
    reads_reference: bool  # the judge was given a reference answer and reads it


def read_run(folder: Path) -> dict[int, Point]:
    """Every `step<N>/results.json` under the folder, by N; a folder without any is an error naming it."""
    points = {}
    for child in folder.iterdir() if folder.is_dir() else ():
        match = STEP_FOLDER.fullmatch(child.name)
        if match and child.is_dir():
            points[int(match.group(1))] = _point(child / "results.json")
    if not points:
        raise FileNotFoundError(f"{folder}: no step<N>/results.json (python -m evaluation --out {folder}/step<N>)")
    return dict(sorted(points.items()))


def _point(path: Path) -> Point:
    results = json.loads(path.read_text())
    missing = [key for key in ("score", "chance", "rows", "failed_rows") if key not in results]
    if missing:
        raise ValueError(f"{path}: no {missing} (is this python -m evaluation's results.json?)")
    consistency = results.get("position_consistency") or {}
    return Point(
        results["score"],
        results["chance"],
        consistency.get("share", math.nan) if consistency.get("completions") else math.nan,
        results["failed_rows"],
        results["rows"],
        reads_reference(results),
    )


def reads_reference(results: dict) -> bool:
    """Whether the evaluation gave the judge a reference answer (--reference-column) that it reads (a judge's
    identity says `reads_answer`; evaluations older than that field were of pairwise judges, which always read it)."""
    column = results.get("config", {}).get("evaluation", {}).get("reference_column")
    return column is not None and results.get("judge", {}).get("reads_answer", True)


def read_metric(path: Path, key: str) -> dict[int, float]:
    """The key's value by step in a verl file-logger JSONL ({"step": N, "data": {...}} per line)."""
    values = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        if "step" not in record or not isinstance(record.get("data"), dict):
            raise ValueError(f"{path}:{number}: not a verl file-logger line ({{'step': N, 'data': {{...}}}})")
        if key in record["data"]:
            values[record["step"]] = float(record["data"][key])
    if not values:
        raise ValueError(f"{path}: no line holds {key!r}")
    return values


def table(runs: list[dict[int, Point]], names: list[str], metrics: list[dict[int, float]], key: str) -> list[str]:
    """Per step and run: the score and its chance, position consistency, failed rows, and the metric there."""
    width = max(map(len, names))
    lines = [
        f"{'step':>4}  {'run':<{width}}  {'reference':>9}  {'score':>6}  {'chance':>6}  {'position consistency':>20}  "
        f"{'failed rows':>11}  {key:>10}"
    ]
    for step, index, name, point in _by_step(runs, names):
        consistency = "-" if math.isnan(point.position_consistency) else f"{point.position_consistency:.3f}"
        metric = metrics[index].get(step) if metrics else None
        shown = "-" if metric is None else f"{metric:.4f}"
        lines.append(
            f"{step:>4}  {name:<{width}}  {'read' if point.reads_reference else 'none':>9}  {100 * point.score:>6.1f}  "
            f"{100 * point.chance:>6.1f}  "
            f"{consistency:>20}  {f'{point.failed_rows}/{point.rows}':>11}  {shown:>10}"
        )
    return lines


def validation_table(validations: list[dict[int, ValidationPoint]], names: list[str]) -> list[str]:
    """Per verl validation step and run: accuracy, format failures, position consistency over the parsed pairs."""
    width = max(map(len, names))
    lines = [
        f"{'step':>4}  {'run':<{width}}  {'verl val accuracy':>17}  {'format failures':>15}  "
        f"{'position consistency':>20}  {'unpaired':>8}"
    ]
    for step, _, name, point in _by_step(validations, names):
        consistency = (
            "-" if math.isnan(point.position_consistency) else f"{point.position_consistency:.3f} of {point.pairs}"
        )
        lines.append(
            f"{step:>4}  {name:<{width}}  {point.accuracy:>17.3f}  {f'{point.format_failures}/{point.rows}':>15}  "
            f"{consistency:>20}  {point.unpaired:>8}"
        )
    return lines


def _by_step(runs: list[dict], names: list[str]):
    """(step, run index, run name, point) for every step any run has, step by step, runs in their order."""
    for step in sorted({step for run in runs for step in run}):
        for index, (name, run) in enumerate(zip(names, runs, strict=True)):
            if step in run:
                yield step, index, name, run[step]


def _consistency_curve(run: dict) -> dict[int, float]:
    """The steps of a run evaluated in both orders, and their position consistency."""
    return {s: p.position_consistency for s, p in run.items() if not math.isnan(p.position_consistency)}


def draw(
    runs: list[dict[int, Point]],
    metrics: list[dict[int, float]],
    key: str,
    validations: list[dict[int, ValidationPoint]],
    out: Path,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    consistency = []
    for curves, label, marker, colour in (
        (runs, "offline evaluation", "s", "tab:orange"),
        (validations, "verl validation", "D", "tab:purple"),
    ):
        curve = [_consistency_curve(run) for run in curves]
        if any(curve):
            consistency.append((curve, label, marker, colour))
    panels = 1 + bool(consistency) + bool(metrics) + bool(validations)
    figure, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), squeeze=False)
    axes = list(axes[0])
    plot_runs(axes[0], [{s: 100 * p.score for s, p in run.items()} for run in runs], "score", "o", "tab:blue")
    for level in sorted({round(100 * p.chance, 1) for run in runs for p in run.values()}):
        axes[0].axhline(level, linestyle="--", color="grey", label=f"chance {level:.1f}")
    axes[0].set(xlabel="step", ylabel="score", ylim=(0, 100), title="Score (RewardBench 2-style)")
    extra = iter(axes[1:])
    if consistency:
        panel = next(extra)
        for curve, label, marker, colour in consistency:
            plot_runs(panel, curve, label, marker, colour)
        panel.set(xlabel="step", ylim=(0, 1), title="Position consistency (both orders)")
    if metrics:
        panel = next(extra)
        plot_runs(panel, metrics, key, "^", "tab:green")
        panel.set(xlabel="step", title=key)
    if validations:
        panel = next(extra)
        accuracy = [{s: p.accuracy for s, p in run.items()} for run in validations]
        plot_runs(panel, accuracy, "accuracy", "D", "tab:purple")
        panel.set(xlabel="step", ylim=(0, 1), title="verl validation accuracy")
    for panel in axes:
        if panel.get_legend_handles_labels()[0]:
            panel.legend(fontsize="small")
    save_figure(figure, out / OUTPUT)
    return out / OUTPUT


def main(argv: list[str] | None = None) -> None:
    (config,) = parse_configs("python -m evaluation.judge_curves", __doc__, [JudgeCurvesConfig], argv)
    for flag, given in (("--metrics", config.metrics), ("--validation", config.validation)):
        if given and len(given) != len(config.runs):
            raise SystemExit(f"judge_curves: {len(given)} {flag} for {len(config.runs)} runs")
    try:
        runs = [read_run(Path(folder)) for folder in config.runs]
        metrics = [read_metric(Path(path), config.metric) for path in config.metrics or ()]
        validations = [read_validation(Path(folder)) for folder in config.validation or ()]
    except (OSError, ValueError) as err:
        raise SystemExit(f"judge_curves: {err}") from None
    print("\n".join(table(runs, config.runs, metrics, config.metric)))
    if validations:
        print("\n".join(validation_table(validations, config.runs)))
    print(draw(runs, metrics, config.metric, validations, Path(config.out)))


if __name__ == "__main__":
    main()
