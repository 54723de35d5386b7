"""The pinned stack holds together (what verl 0.6.1 needs from its neighbours at import time), and the commands
that the demo prints last work in a user's shell (the READMEs' commands: tests/test_readme_commands.py)."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import transformers
from packaging.version import Version

from tests.conftest import REPO_ROOT
from tests.launcher_helpers import launcher_env


def test_versions_verl_061_imports_with():
    import verl

    assert verl.__version__ == "0.6.1"
    assert Version(transformers.__version__) < Version("5")  # verl/utils/model.py imports AutoModelForVision2Seq
    assert Version(numpy.__version__) < Version("2")


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl (the `bench` extra) is not installed")
def test_installed_trl_still_has_what_verl_monkey_patches():
    """verl 0.6.1's apply_monkey_patch imports trl.AutoModelForCausalLMWithValueHead whenever trl is installed
    (every GRPO actor and reference model goes through it); TRL 0.29 removed that class, so a newer TRL in the
    same environment breaks GRPO training."""
    from trl import AutoModelForCausalLMWithValueHead  # noqa: F401


def demo_next_commands() -> list[str]:
    """The commands `make demo` prints last (run_demo.sh's next_commands), as the demo prints them."""
    script = (REPO_ROOT / "cookbooks/demo/run_demo.sh").read_text()
    function = re.search(r"^next_commands\(\) \{\n.*?^\}\n", script, re.DOTALL | re.MULTILINE)
    assert function, "cookbooks/demo/run_demo.sh: no next_commands() function"
    demo_dir = "./runs/demo"
    printed = subprocess.run(
        ["bash", "-c", function.group(0) + "next_commands"],
        cwd=REPO_ROOT,
        env=launcher_env(DEMO_DIR=demo_dir, DATA_DIR=f"{demo_dir}/data", JUDGE_DIR=f"{demo_dir}/bt/hf"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.strip() for line in printed.splitlines() if line.startswith("    ")]


def run_in_a_new_shell(command: str, home: Path) -> subprocess.CompletedProcess:
    """`command` in a new bash at the repository root, with what a user's fresh login has and nothing of ours."""
    return subprocess.run(
        ["env", "-i", f"HOME={home}", "PATH=/usr/bin:/bin", "bash", "-c", command],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_commands_the_demo_prints_last_work_in_a_new_shell(tmp_path):
    enter, *commands = demo_next_commands()
    venv = Path(sys.prefix)  # the demo's environment is this one: launcher_env puts it first on PATH
    assert enter == f"source {venv.relative_to(REPO_ROOT) if venv.is_relative_to(REPO_ROOT) else venv}/bin/activate"
    assert [command.split()[:3] for command in commands] == [
        ["python", "-m", "serving"],
        ["python", "-m", "evaluation"],
    ]
    for command in commands:
        module = command.split()[2]
        entered = run_in_a_new_shell(f"{enter} && {command} --help", tmp_path)
        assert entered.returncode == 0, f"{command}\n{entered.stderr[-2000:]}"
        assert f"usage: python -m {module}" in entered.stdout
        # The check can fail: without entering the environment, the same command does not run.
        assert run_in_a_new_shell(f"{command} --help", tmp_path).returncode != 0
