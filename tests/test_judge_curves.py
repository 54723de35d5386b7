"""`python -m evaluation.judge_curves`: learning curves from the evaluation's own results.json files and verl's own
file-logger metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
from verl.utils.tracking import FileLogger

from evaluation.judge_curves import OUTPUT, main, reads_reference
from evaluation.report import write_outputs
from evaluation.run import EvaluationOptions, evaluate
from tests.support.readme_blocks import readme_arguments
from tests.test_evaluate_run import REFERENCE_ROWS, ROWS, LengthJudge, ReferenceJudge


def evaluated(folder: Path, judge, rows) -> Path:
    write_outputs(evaluate(rows, judge, EvaluationOptions(Path("d.parquet"), folder), judge_config={}, data_digest="x"))
    return folder


def metrics_file(path: Path, losses: dict[int, float], monkeypatch) -> Path:
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("judge-sft", "run")
    for step, loss in losses.items():
        logger.log({"train/loss": loss + 1}, step)
        logger.log({"val/loss": loss}, step)
    logger.finish()
    return path


@pytest.fixture
def two_runs(tmp_path):
    for seed in (1, 2):
        evaluated(tmp_path / f"s{seed}" / "step0", LengthJudge(), ROWS)
        evaluated(tmp_path / f"s{seed}" / "step10", ReferenceJudge(), REFERENCE_ROWS)
    return tmp_path / "s1", tmp_path / "s2"


def test_table_per_step_and_run_with_consistency_failures_and_the_metric(two_runs, tmp_path, monkeypatch, capsys):
    metrics = [metrics_file(tmp_path / f"m{seed}.jsonl", {0: 0.9, 10: 0.1 * seed}, monkeypatch) for seed in (1, 2)]
    out = tmp_path / "plots"
    words = {  # evaluation/README.md's command, on these runs
        "evals/val/seed1": str(two_runs[0]),
        "evals/val/seed2": str(two_runs[1]),
        "checkpoints/seed1/launch/metrics.jsonl": str(metrics[0]),
        "checkpoints/seed2/launch/metrics.jsonl": str(metrics[1]),
        "plots/": str(out),
    }
    main(readme_arguments("evaluation/README.md", "python -m evaluation.judge_curves evals/val/seed1", words))
    lines = capsys.readouterr().out.splitlines()
    s1, s2 = map(str, two_runs)
    width = len(s1)
    assert lines[0].split() == [
        "step",
        "run",
        "reference",
        "score",
        "chance",
        "position",
        "consistency",
        "failed",
        "rows",
        "val/loss",
    ]
    # ROWS under LengthJudge: 75.0 (see test_evaluate_run), chance the mean of 1/3 and 1/2, one order, no failure
    assert lines[1] == f"   0  {s1:<{width}}       none    75.0    41.7                     -          0/3      0.9000"
    assert lines[2] == f"   0  {s2:<{width}}       none    75.0    41.7                     -          0/3      0.9000"
    # REFERENCE_ROWS under ReferenceJudge: 5 of 8 completions agree across orders; row c fails
    assert lines[3].startswith(f"  10  {s1:<{width}}  ") and lines[3].endswith("0.625          1/3      0.1000")
    assert lines[4].startswith(f"  10  {s2:<{width}}  ") and lines[4].endswith("0.625          1/3      0.2000")
    assert lines[5] == str(out / OUTPUT)
    assert (out / OUTPUT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("column", "judge", "reads"),
    [
        ("reference", {"reads_answer": True}, True),
        (None, {"reads_answer": True}, False),  # given none
        ("reference", {"reads_answer": False}, False),  # a judge that ignores answers
        ("reference", {}, True),  # evaluations from before `reads_answer`: pairwise judges, which read it
    ],
)
def test_the_reference_column_says_whether_the_judge_read_a_reference_answer(column, judge, reads):
    results = {"config": {"evaluation": {"reference_column": column}}, "judge": judge}
    assert reads_reference(results) is reads


def test_without_metrics_the_metric_column_is_empty(two_runs, tmp_path, capsys):
    main([str(two_runs[0]), "--out", str(tmp_path / "plots")])
    assert capsys.readouterr().out.splitlines()[1].endswith("0/3           -")


def panels_drawn(png: Path) -> int:
    width = int.from_bytes(png.read_bytes()[16:20], "big")  # the PNG header's width; 500 px per panel
    return width // 500


def test_the_consistency_panel_is_drawn_only_for_runs_evaluated_in_both_orders(two_runs, tmp_path, capsys):
    one_order = evaluated(tmp_path / "pointwise" / "step0", LengthJudge(), ROWS).parent
    main([str(one_order), "--out", str(tmp_path / "one")])
    main([str(two_runs[0]), "--out", str(tmp_path / "both")])
    assert panels_drawn(tmp_path / "one" / OUTPUT) == 1  # the score only
    assert panels_drawn(tmp_path / "both" / OUTPUT) == 2  # the score and the position consistency


def test_a_folder_without_step_evaluations_is_an_error_naming_it(tmp_path):
    (tmp_path / "final").mkdir()
    with pytest.raises(SystemExit, match=rf"^judge_curves: {tmp_path}: no step<N>/results.json"):
        main([str(tmp_path)])


def test_a_results_file_of_something_else_is_an_error_naming_it(tmp_path):
    (tmp_path / "step3").mkdir()
    (tmp_path / "step3" / "results.json").write_text('{"score": 0.5}')
    with pytest.raises(SystemExit, match=r"step3/results.json: no \['chance', 'rows', 'failed_rows'\]"):
        main([str(tmp_path)])


def test_metrics_must_match_the_runs_and_hold_the_key(two_runs, tmp_path, monkeypatch):
    metrics = metrics_file(tmp_path / "m.jsonl", {0: 0.5}, monkeypatch)
    with pytest.raises(SystemExit, match=r"^judge_curves: 1 --metrics for 2 runs$"):
        main([*map(str, two_runs), "--metrics", str(metrics)])
    with pytest.raises(SystemExit, match=r"m.jsonl: no line holds 'val-core/reward'$"):
        main([str(two_runs[0]), "--metrics", str(metrics), "--metric", "val-core/reward"])
    (tmp_path / "bad.jsonl").write_text('{"loss": 1}\n')
    with pytest.raises(SystemExit, match=r"bad.jsonl:1: not a verl file-logger line"):
        main([str(two_runs[0]), "--metrics", str(tmp_path / "bad.jsonl")])
