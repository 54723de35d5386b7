"""evaluation.reward_plots: verl 0.6.1's own rollout dumps (RayPPOTrainer._dump_generations) turned into PNGs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from data_prep import offline
from evaluation.reward_plots import (
    COMPONENTS_OUTPUT,
    OUTPUTS,
    Row,
    assign_subsets,
    by_subset,
    components,
    first_to_last,
    per_step,
    read_rollouts,
    sign_test,
)
from tests.conftest import REPO_ROOT
from tests.support.readme_blocks import readme_command

pytestmark = pytest.mark.e2e

PNG = b"\x89PNG\r\n\x1a\n"


def dump_steps(directory, shift: float = 0.0) -> None:
    """Two steps of rollouts in verl 0.6.1's own format: step 1 short and half right, step 2 long and half right;
    `shift` is added to every reward."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    for step, padding in ((1, ""), (2, " and so on" * 20)):
        outputs = [f"The answer is \\boxed{{{n}}}{padding}" for n in (4, 5, 4, 5)]
        scores = [score + shift for score in ((0.2, 0.1, 0.3, 0.2) if step == 1 else (0.9, 0.8, 1.0, 0.9))]
        trainer = SimpleNamespace(global_steps=step)
        extra = {"source": ["judge"] * 4}
        RayPPOTrainer._dump_generations(
            trainer, ["What is 2+2?"] * 4, outputs, ["4"] * 4, scores, extra, str(directory)
        )


def test_rollout_dumps_become_pictures(tmp_path):
    dump_steps(tmp_path / "rollouts")
    rows = read_rollouts(tmp_path / "rollouts")
    steps = per_step(rows)
    assert list(steps) == [1, 2]
    assert [r.rule_score for r in steps[2]] == [1.0, 0.0, 1.0, 0.0]  # the rules read the reference answer
    assert steps[2][0].length > steps[1][0].length
    # the rl_with_judge_reward cookbook's command, on this run's rollouts
    words = {"$ROLLOUT_DATA_DIR": str(tmp_path / "rollouts"), "reward_plots": str(tmp_path / "png")}
    command = readme_command("cookbooks/rl_with_judge_reward/README.md", "python -m evaluation.reward_plots", words)
    subprocess.run(command, check=True, cwd=REPO_ROOT)
    for name in OUTPUTS:
        assert (tmp_path / "png" / name).read_bytes().startswith(PNG)


def test_runs_with_other_seeds_are_drawn_and_printed_together(tmp_path):
    dump_steps(tmp_path / "seed1")
    dump_steps(tmp_path / "seed2", shift=-0.1)
    command = [sys.executable, "-m", "evaluation.reward_plots", str(tmp_path / "seed1"), str(tmp_path / "seed2")]
    result = subprocess.run(
        [*command, "--out", str(tmp_path / "png")], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    table = [line.split() for line in result.stdout.splitlines()[1:7]]
    assert [(row[0], Path(row[1]).name, row[2:]) for row in table] == [  # 4 pairs: right ones 0.2/0.3, wrong 0.1/0.2
        ("1", "seed1", ["4", "0.200", "0.500", "4", "0.875"]),
        ("1", "seed2", ["4", "0.100", "0.500", "4", "0.875"]),
        ("2", "seed1", ["4", "0.900", "0.500", "4", "0.875"]),
        ("2", "seed2", ["4", "0.800", "0.500", "4", "0.875"]),
        ("all", "seed1", ["8", "0.550", "0.500", "8", "0.875"]),  # pairs stay within a step
        ("all", "seed2", ["8", "0.450", "0.500", "8", "0.875"]),
    ]
    for name in OUTPUTS:
        assert (tmp_path / "png" / name).read_bytes().startswith(PNG)


def test_a_row_that_is_not_a_rollout_is_named(tmp_path):
    (tmp_path / "3.jsonl").write_text('{"input": "q", "output": "4", "score": 1.0}\n{"input": "q"}\n')
    command = [sys.executable, "-m", "evaluation.reward_plots", str(tmp_path)]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode != 0 and "3.jsonl:2: the row has no ['output', 'score']" in result.stderr


def test_sign_test_is_exact_and_two_sided():
    assert sign_test(6, 0) == sign_test(0, 6) == pytest.approx(2 / 64)
    assert sign_test(5, 5) == sign_test(0, 0) == 1.0
    assert sign_test(28, 9) == pytest.approx(0.00256, abs=1e-5)


def test_first_to_last_counts_questions_that_changed_between_a_runs_first_and_last_step():
    def answers(step, scores):
        return [Row(step, f"q{i}", 0.5, 10, score) for i, score in enumerate(scores)]

    validation = answers(0, [0, 0, 0, 1, None]) + answers(8, [1, 0, 1, 1, 1]) + answers(16, [1, 1, 0, 0, 1])
    rollouts = answers(1, [0, 1]) * 2 + answers(2, [1, 1]) * 2  # each question answered twice a step
    lines = first_to_last([validation, rollouts], ["val", "roll"])
    assert lines[1].split() == ["val", "0->16", "4", "2", "1", "1.0000"]  # q4 has no rule score at step 0
    assert lines[2].split() == ["roll", "1->2", "0", "0", "0", "-"]


def test_a_reward_specs_components_are_averaged_where_they_scored_and_drawn(tmp_path):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    nan = float("nan")
    for step, judge, rule in ((1, [0.2, 0.4, 0.6, 0.8], [1.0, 0.0, nan, nan]), (2, [0.5] * 4, [nan] * 4)):
        extra = {"component/judge": judge, "component/arithmetic": rule, "component/judge/source": ["judge"] * 4}
        trainer = SimpleNamespace(global_steps=step)
        RayPPOTrainer._dump_generations(trainer, ["q"] * 4, ["4"] * 4, ["4"] * 4, [0.5] * 4, extra, str(tmp_path / "d"))
    rows = read_rollouts(tmp_path / "d")
    assert rows[0].components == {"judge": 0.2, "arithmetic": 1.0}  # the source and health keys are no components
    lines = components([rows], ["run"])
    assert [line.split() for line in lines] == [
        ["step", "run", "judge", "arithmetic"],
        ["1", "run", "0.500", "0.500"],  # the rule over the 2 rows it scored
        ["2", "run", "0.500", "-"],
    ]
    command = [sys.executable, "-m", "evaluation.reward_plots", str(tmp_path / "d"), "--out", str(tmp_path / "png")]
    subprocess.run(command, cwd=REPO_ROOT, capture_output=True, check=True)
    assert (tmp_path / "png" / COMPONENTS_OUTPUT).read_bytes().startswith(PNG)


def test_rows_are_named_by_their_questions_subset(tmp_path):
    offline.generate(tmp_path / "data", offline.OfflineConfig(train_size=24, val_size=8, eval_size=5))
    questions = tmp_path / "data/policy/val.parquet"
    import pyarrow.parquet as pq

    extra = pq.read_table(questions).column("extra_info").to_pylist()
    arithmetic = next(e for e in extra if e["subset"] == "arithmetic")
    other = next(e for e in extra if e["subset"] != "arithmetic")
    prompt = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    rows = [
        Row(0, prompt.format(arithmetic["question"]), 0.5, 5, 0.0),
        Row(0, prompt.format(other["question"]), 0.5, 5, 1.0),
        Row(8, prompt.format(arithmetic["question"]), 0.5, 5, 1.0),
        Row(8, prompt.format(other["question"]), 0.5, 5, 1.0),
    ]
    assign_subsets(rows, questions)
    assert [row.subset for row in rows] == ["arithmetic", other["subset"]] * 2
    lines = by_subset([rows], ["run"])
    assert lines[1].split() == ["arithmetic", "run", "0.000", "1.000", "1", "0", "1.0000"]
    assert lines[2].split() == [other["subset"], "run", "1.000", "1.000", "0", "0", "1.0000"]
    stray = [Row(0, "What is the colour of the sky?", 0.5, 5, 0.0)]
    with pytest.raises(ValueError, match=r"val.parquet: no extra_info.question in the prompt 'What is the colour"):
        assign_subsets(stray, questions)
