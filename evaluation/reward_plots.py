"""Pictures of a policy run's rewards from verl's rollout dumps: `python -m evaluation.reward_plots DIR [DIR ...]
--out OUT`.

DIR is verl's `trainer.rollout_data_dir` or `trainer.validation_data_dir`: one `<step>.jsonl` per step, each row
{input, output, gts, score, step, ...reward extra info} (verl 0.6.1's `RayPPOTrainer._dump_generations`). Several
DIRs are runs of the same settings with other seeds. It writes three PNGs into OUT:

    reward_histogram.png   the reward distribution of each step (one line per step; every run's answers)
    reward_vs_length.png   each answer's reward against its length in characters, coloured by step
    judge_vs_rules.png     per step, the judge's mean reward and the rule scorer's accuracy against the reference
                           answers (`gts`, judge_core.rules; rows without a reference the rules can score are
                           left out and counted): each run's curve, and with several runs their mean and range;
                           from validation_data_dir, the held-out curves

and prints the same figures per step and run (and per run over all its steps), with the judge's pair accuracy: in
each pair of a rule-right and a rule-wrong answer to the same prompt (`input`) at the same step, how often the judge
rewards the right one more (judge_rewards.reward_health's `health_rule_pair_accuracy`; only rollouts of several
answers per prompt have such pairs). Last, per run, the questions answered once at both its first and last step
(validation dumps: the same held-out questions) that went from rule-wrong to rule-right and back, with an exact sign
test: did the rule accuracy rise by more than chance? matplotlib comes with the `eval` extra.

Dumps of a reward spec's runs (judge_rewards/reward_spec.py: a float `component/<name>` per row, NaN where the
component did not score) add each component's mean per step and run, over the rows it scored, and
`components.png`, its curves. `--questions POLICY_PARQUET` (the runs' VAL_FILE, or TRAIN_FILE for rollouts) names
each row's `extra_info.subset` by its question, and adds per subset and run the rule accuracy at the first and last
step with the sign test of the questions gained and lost.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import statistics
from pathlib import Path

from judge_core import rules
from judge_core.settings import REQUIRED, option, parse_configs
from judge_rewards.reward_health import rule_pair_accuracy

HISTOGRAM_BINS = 10
OUTPUTS = ("reward_histogram.png", "reward_vs_length.png", "judge_vs_rules.png")
COMPONENTS_OUTPUT = "components.png"
COMPONENT_PREFIX = "component/"  # judge_rewards.composed_reward's key of a component's value


@dataclasses.dataclass
class RewardPlotsConfig:
    rollout_dirs: list[str] = option(
        REQUIRED,
        "verl's rollout_data_dir or validation_data_dir (<step>.jsonl files); several: the same run with other seeds",
        positional=True,
    )
    questions: str = option("", "the policy parquet the runs answered: figures per extra_info.subset")
    out: str = option("reward_plots", "folder the PNGs are written to")


@dataclasses.dataclass
class Row:
    step: int
    prompt: str
    reward: float
    length: int
    rule_score: float | None  # None: no reference the rules can score
    components: dict[str, float] = dataclasses.field(default_factory=dict)  # a reward spec's; NaN: not scored
    subset: str | None = None  # the question's extra_info.subset (--questions)


def read_rollouts(directory: Path) -> list[Row]:
    """Every row of the directory's `<step>.jsonl` files; a row without `output` or `score` is an error naming it."""
    files = sorted(directory.glob("*.jsonl"), key=lambda path: (not path.stem.isdigit(), path.stem.zfill(12)))
    if not files:
        raise FileNotFoundError(f"{directory}: no <step>.jsonl files (verl's rollout_data_dir / validation_data_dir)")
    rows = []
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                rows.append(_row(json.loads(line), path, number))
    return rows


def _row(record: dict, path: Path, number: int) -> Row:
    missing = [key for key in ("input", "output", "score") if key not in record]
    if missing:
        raise ValueError(f"{path}:{number}: the row has no {missing} (is this a verl rollout dump?)")
    step = record.get("step", path.stem)
    return Row(
        int(step),
        record["input"],
        float(record["score"]),
        len(record["output"]),
        _rule_score(record["output"], record.get("gts")),
        {
            key.removeprefix(COMPONENT_PREFIX): float(value)
            for key, value in record.items()
            if key.startswith(COMPONENT_PREFIX) and "/" not in key.removeprefix(COMPONENT_PREFIX)
        },
    )


def assign_subsets(rows: list[Row], questions_path: Path) -> None:
    """Each row's subset: that of the longest policy question (extra_info.question) its prompt contains; a prompt
    that contains none is an error naming it."""
    import pyarrow.parquet as pq

    subsets = {}
    for row in pq.read_table(questions_path, columns=["extra_info"]).column("extra_info").to_pylist():
        subsets[str(row["question"])] = row.get("subset")
    by_length = sorted(subsets, key=len, reverse=True)
    for row in rows:
        question = next((q for q in by_length if q in row.prompt), None)
        if question is None:
            raise ValueError(f"{questions_path}: no extra_info.question in the prompt {row.prompt[:200]!r}")
        row.subset = subsets[question]


def _rule_score(output: str, reference) -> float | None:
    if reference is None or reference == "":
        return None
    try:
        return rules.score_answer(output, str(reference)).score
    except ValueError:
        return None


def per_step(rows: list[Row]) -> dict[int, list[Row]]:
    steps: dict[int, list[Row]] = {}
    for row in rows:
        steps.setdefault(row.step, []).append(row)
    return dict(sorted(steps.items()))


def draw(runs: list[list[Row]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    rows = [row for run in runs for row in run]
    steps = per_step(rows)
    colours = plt.get_cmap("viridis")
    shade = {step: colours(i / max(1, len(steps) - 1)) for i, step in enumerate(steps)}

    figure, axes = plt.subplots(figsize=(7, 4))
    for step, members in steps.items():
        axes.hist(
            [r.reward for r in members],
            bins=HISTOGRAM_BINS,
            range=(0, 1),
            histtype="step",
            color=shade[step],
            label=f"step {step}",
        )
    axes.set(xlabel="reward", ylabel="answers", title="Reward distribution per step")
    axes.legend(fontsize="small")
    save_figure(figure, out / OUTPUTS[0])

    figure, axes = plt.subplots(figsize=(7, 4))
    for step, members in steps.items():
        axes.scatter(
            [r.length for r in members], [r.reward for r in members], s=10, color=shade[step], label=f"step {step}"
        )
    axes.set(xlabel="answer length (characters)", ylabel="reward", title="Reward against answer length")
    axes.legend(fontsize="small")
    save_figure(figure, out / OUTPUTS[1])

    figure, axes = plt.subplots(figsize=(7, 4))
    runs_by_step = [per_step(run) for run in runs]
    for label, marker, colour, figure_of in (
        ("judge: mean reward", "o", "tab:blue", _mean_reward),
        ("rules: accuracy", "s", "tab:orange", _rule_accuracy),
    ):
        plot_runs(
            axes,
            [{step: figure_of(members) for step, members in by_step.items()} for by_step in runs_by_step],
            label,
            marker,
            colour,
        )
    checked = sum(r.rule_score is not None for r in rows)
    axes.set(xlabel="step", ylim=(0, 1), title=f"Judge against rules ({checked}/{len(rows)} answers rule-checkable)")
    axes.legend(fontsize="small")
    save_figure(figure, out / OUTPUTS[2])
    written = [out / name for name in OUTPUTS]
    names = component_names(rows)
    if names:
        figure, axes = plt.subplots(figsize=(7, 4))
        for name, colour in zip(names, plt.get_cmap("tab10").colors, strict=False):
            curves = [{step: _component_mean(members, name) for step, members in by.items()} for by in runs_by_step]
            plot_runs(axes, curves, f"component {name}: mean where scored", "o", colour)
        axes.set(xlabel="step", ylim=(0, 1), title="Reward components per step")
        axes.legend(fontsize="small")
        save_figure(figure, out / COMPONENTS_OUTPUT)
        written.append(out / COMPONENTS_OUTPUT)
    return written


def plot_runs(axes, curves: list[dict[int, float]], label: str, marker: str, colour: str) -> None:
    """One run: its curve. Several: each faint, their mean, and their range shaded."""
    if len(curves) == 1:
        axes.plot(list(curves[0]), list(curves[0].values()), marker=marker, color=colour, label=label)
        return
    for curve in curves:
        axes.plot(list(curve), list(curve.values()), marker=marker, color=colour, alpha=0.3)
    shared = sorted(set.intersection(*(set(curve) for curve in curves)))
    values = [[curve[step] for curve in curves] for step in shared]
    axes.plot(
        shared,
        [statistics.fmean(v) for v in values],
        marker=marker,
        color=colour,
        label=f"{label} (mean of {len(curves)} runs, range shaded)",
    )
    axes.fill_between(shared, [min(v) for v in values], [max(v) for v in values], color=colour, alpha=0.2)


def summary(runs: list[list[Row]], names: list[str]) -> list[str]:
    """Per step and run, then per run over all its steps ('all'): answers, the judge's mean reward, the rules'
    accuracy, and the judge's pair accuracy (with its pairs; '-' without any)."""
    width = max(map(len, names))
    lines = [
        f"{'step':>4}  {'run':<{width}}  {'answers':>7}  {'judge mean':>10}  {'rule accuracy':>13}  {'pairs':>5}  "
        f"{'pair accuracy':>13}"
    ]
    runs_by_step = [per_step(run) for run in runs]
    for step in sorted({step for by_step in runs_by_step for step in by_step}):
        for name, by_step in zip(names, runs_by_step, strict=True):
            if step in by_step:
                lines.append(_summary_line(str(step), name, width, by_step[step]))
    lines += [_summary_line("all", name, width, run) for name, run in zip(names, runs, strict=True)]
    return lines


def component_names(rows: list[Row]) -> list[str]:
    return list(dict.fromkeys(name for row in rows for name in row.components))


def components(runs: list[list[Row]], names: list[str]) -> list[str]:
    """Per step and run, each component's mean over the rows it scored ('-': none); no lines without components."""
    parts = component_names([row for run in runs for row in run])
    if not parts:
        return []
    width = max(map(len, names))
    columns = [max(len(part), 6) for part in parts]
    lines = [f"{'step':>4}  {'run':<{width}}  " + "  ".join(f"{p:>{c}}" for p, c in zip(parts, columns, strict=True))]
    runs_by_step = [per_step(run) for run in runs]
    for step in sorted({step for by_step in runs_by_step for step in by_step}):
        for name, by_step in zip(names, runs_by_step, strict=True):
            if step in by_step:
                means = [shown(_component_mean(by_step[step], part)) for part in parts]
                lines.append(
                    f"{step:>4}  {name:<{width}}  "
                    + "  ".join(f"{m:>{c}}" for m, c in zip(means, columns, strict=True))
                )
    return lines


def by_subset(runs: list[list[Row]], names: list[str]) -> list[str]:
    """Per subset and run: the rule accuracy at the first and the last step, and first_to_last's counts."""
    subsets = sorted({row.subset for run in runs for row in run if row.subset is not None})
    if not subsets:
        return []
    width = max(map(len, names))
    lines = [
        f"{'subset':<10}  {'run':<{width}}  {'first':>5}  {'last':>5}  {'gained':>6}  {'lost':>4}  {'sign test p':>11}"
    ]
    for subset in subsets:
        for name, run in zip(names, runs, strict=True):
            by_step = per_step([row for row in run if row.subset == subset])
            gained, lost, common = _gained_lost(by_step)
            p = f"{sign_test(gained, lost):.4f}" if common else "-"
            first, last = (shown(_rule_accuracy(by_step[step])) for step in (min(by_step), max(by_step)))
            lines.append(f"{subset:<10}  {name:<{width}}  {first:>5}  {last:>5}  {gained:>6}  {lost:>4}  {p:>11}")
    return lines


def first_to_last(runs: list[list[Row]], names: list[str]) -> list[str]:
    """Per run, the questions answered once at both its first and its last step, with a reference the rules can
    score (validation dumps: the same held-out questions each time): how many went from rule-wrong to rule-right
    (gained) and back (lost), and the exact two-sided sign test's p of that split ('-' without such questions)."""
    width = max(map(len, names))
    lines = [f"{'run':<{width}}  {'steps':>9}  {'questions':>9}  {'gained':>6}  {'lost':>4}  {'sign test p':>11}"]
    for name, run in zip(names, runs, strict=True):
        by_step = per_step(run)
        first, last = min(by_step), max(by_step)
        gained, lost, common = _gained_lost(by_step)
        p = f"{sign_test(gained, lost):.4f}" if common else "-"
        lines.append(f"{name:<{width}}  {f'{first}->{last}':>9}  {common:>9}  {gained:>6}  {lost:>4}  {p:>11}")
    return lines


def _gained_lost(by_step: dict[int, list[Row]]) -> tuple[int, int, int]:
    """Questions gained and lost between the first and the last step, and how many were answered at both."""
    before, after = _once(by_step[min(by_step)]), _once(by_step[max(by_step)])
    common = before.keys() & after.keys()
    gained = sum(before[q] < 0.5 <= after[q] for q in common)
    return gained, sum(after[q] < 0.5 <= before[q] for q in common), len(common)


def _once(members: list[Row]) -> dict[str, float]:
    """Rule score by prompt, for the prompts answered once at the step with a score the rules can give."""
    counts = collections.Counter(row.prompt for row in members)
    return {r.prompt: r.rule_score for r in members if counts[r.prompt] == 1 and r.rule_score is not None}


def sign_test(gained: int, lost: int) -> float:
    """Exact two-sided sign test: the chance of a split at least this uneven if a change were as likely either way."""
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(gained, lost) + 1)) / 2**n
    return min(1.0, 2 * tail)


def _summary_line(step: str, name: str, width: int, members: list[Row]) -> str:
    pairs, pair_accuracy = _pair_accuracy(members)
    return (
        f"{step:>4}  {name:<{width}}  {len(members):>7}  {_mean_reward(members):>10.3f}  "
        f"{_rule_accuracy(members):>13.3f}  {pairs:>5.0f}  {shown(pair_accuracy):>13}"
    )


def _component_mean(members: list[Row], name: str) -> float:
    values = [v for r in members if not math.isnan(v := r.components.get(name, math.nan))]
    return statistics.fmean(values) if values else math.nan


def shown(value: float) -> str:
    """A figure as the tables print it: 3 decimals, or '-' for none (NaN)."""
    return "-" if math.isnan(value) else f"{value:.3f}"


def _mean_reward(members: list[Row]) -> float:
    return statistics.fmean(r.reward for r in members)


def _rule_accuracy(members: list[Row]) -> float:
    scores = [r.rule_score for r in members if r.rule_score is not None]
    return statistics.fmean(scores) if scores else math.nan


def _pair_accuracy(members: list[Row]) -> tuple[float, float]:
    groups: dict[tuple[int, str], list[tuple[float, float | None]]] = {}
    for row in members:
        groups.setdefault((row.step, row.prompt), []).append((row.reward, row.rule_score))
    return rule_pair_accuracy(list(groups.values()))


def save_figure(figure, path: Path) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    (config,) = parse_configs("python -m evaluation.reward_plots", __doc__, [RewardPlotsConfig], argv)
    try:
        runs = [read_rollouts(Path(directory)) for directory in config.rollout_dirs]
        for run in runs if config.questions else []:
            assign_subsets(run, Path(config.questions))
    except (OSError, ValueError) as err:
        raise SystemExit(f"reward_plots: {err}") from None
    for table in (summary, first_to_last, components, by_subset):
        lines = table(runs, config.rollout_dirs)
        if lines:
            print("\n".join(lines))
    for path in draw(runs, Path(config.out)):
        print(path)


if __name__ == "__main__":
    main()
