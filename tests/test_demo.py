"""`make demo`'s script end to end with the tiny model and a 2-step BT run: every stage really runs
(offline data, base model, verl BT training + export, judge server, JudgeRewardSystem, evaluation)."""

import json
import shlex
import subprocess

import pytest

from tests.conftest import REPO_ROOT
from tests.launcher_helpers import launcher_env
from tests.support.readme_blocks import commands, readme_block

pytestmark = pytest.mark.e2e


def make_demo_script() -> str:
    """The script README.md's `make demo` runs: the bash command of the Makefile's demo recipe."""
    assert "make demo" in commands(readme_block("README.md", "make demo").text)
    recipe = (REPO_ROOT / "Makefile").read_text().split("\ndemo: setup\n", 1)[1].split("\n\n", 1)[0]
    [script] = [words[words.index("bash") + 1] for words in map(shlex.split, recipe.splitlines()) if "bash" in words]
    return script


def test_demo_runs_every_stage_with_the_tiny_model(tmp_path):
    demo_dir = tmp_path / "demo"
    env = launcher_env(DEMO_DIR=demo_dir, BASE_MODEL="tiny")
    bt_settings = [
        "trainer.total_training_steps=2",
        "data.train_batch_size=4",
        "data.micro_batch_size_per_gpu=2",
        "data.max_length=128",
    ]
    result = subprocess.run(
        ["bash", str(REPO_ROOT / make_demo_script()), *bt_settings],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    sample_lines = [line for line in result.stdout.splitlines() if line.endswith("'") and " judge " in line]
    assert len(sample_lines) == 10  # 5 prompts x (correct, flawed), all answered by the judge
    assert "batched_fraction=1.0" in result.stdout and "circuit=closed" in result.stdout

    last_step = result.stdout.rsplit("=== ", 1)[-1]  # ends with the commands to run next (test_environment.py)
    assert "\n    source " in last_step and "\n    python -m serving --model " in last_step
    assert (demo_dir / "bt/hf/judge.json").is_file()
    assert "(environment) overrides" not in result.stderr  # the demo's own settings are arguments, not knobs
    assert (demo_dir / "bt/launch/train.log").is_file()
    evaluation = json.loads((demo_dir / "eval/results.json").read_text())
    assert evaluation["rows"] == 100 and evaluation["failed_rows"] == 0
    assert 0.0 <= evaluation["score"] <= 1.0 and evaluation["judge"]["kind"] == "scalar"
    assert (demo_dir / "eval/report.md").read_text().count("|") > 20
    assert (demo_dir / "eval/chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
