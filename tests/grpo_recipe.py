"""Helpers of the GRPO recipe tests: run the bash launchers as a user would, and build verl RL parquet in
the format data_prep writes (prompt built by judge_rewards.protocol.templates, JSON ground truth)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pandas as pd

from judge_rewards.protocol import templates
from tests.conftest import REPO_ROOT
from tests.launcher_helpers import launcher_env as recipe_env

COOKBOOK = REPO_ROOT / "cookbooks" / "training_judge_model"
GRPO_DIR = COOKBOOK / "grpo"
LAUNCHERS = {"pointwise": "pointwise/run_pointwise.sh", "pairwise": "pairwise/run_pairwise.sh"}
REWARD_FUNCTIONS = {"pointwise": "compute_pointwise_score", "pairwise": "compute_pairwise_score"}
DATA_SOURCE = "judge_test"


def _grpo_knobs() -> set[str]:
    names = re.findall(r"^\s*knob (\w+)", (GRPO_DIR / "common" / "grpo.sh").read_text(), flags=re.MULTILINE)
    return set(names) | {"DEVICE"}


def launcher_env(**knobs) -> dict[str, str]:
    """The recipes' test environment without any GRPO knob the caller's environment may carry, plus `knobs`."""
    env = recipe_env()
    for name in _grpo_knobs():
        env.pop(name, None)
    env.update({key: str(value) for key, value in knobs.items()})
    return env


def run_launcher(mode: str, *args: str, env: dict[str, str], cwd: Path = GRPO_DIR) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(GRPO_DIR / LAUNCHERS[mode]), *args], cwd=cwd, env=env, text=True, capture_output=True, timeout=60
    )


def dry_run_commands(result: subprocess.CompletedProcess) -> list[list[str]]:
    """The commands a --dry-run printed, one argument list per line (the trainer, then the export)."""
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines() if line.strip()]


def rl_rows(mode: str, split: str, count: int) -> list[dict]:
    """GRPO rows as data_prep writes them: the pointwise label cycles 0..4, the pairwise one A, B, A, ..."""
    rows = []
    for index in range(count):
        question, right, wrong = f"What is {index} + {index}?", f"It is {2 * index}.", f"It is {2 * index + 1}."
        if mode == "pointwise":
            prompt = templates.pointwise_messages(question, right if index % 2 else wrong)
            ground_truth = templates.pointwise_ground_truth(index % 5)
        else:
            a, b = (right, wrong) if index % 2 == 0 else (wrong, right)
            prompt = templates.pairwise_messages(question, a, b)
            ground_truth = templates.pairwise_ground_truth("A" if index % 2 == 0 else "B")
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": prompt,
                "ability": "judge",
                "reward_model": {"style": "rule", "ground_truth": ground_truth},
                "extra_info": {"split": split, "index": index},
            }
        )
    return rows


def write_rl_data(directory: Path, mode: str, train_rows: int = 8, val_rows: int = 4) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for split, count in (("train", train_rows), ("val", val_rows)):
        path = directory / f"{split}.parquet"
        pd.DataFrame(rl_rows(mode, split, count)).to_parquet(path)
        paths.append(path)
    return paths[0], paths[1]


def judge_sft_rows(count: int) -> list[dict]:
    """SFT conversations that end in a well-formed judge answer (no reasoning), both modes alternating."""
    rows = []
    for index in range(count):
        question, answer = f"What is {index} + {index}?", f"It is {2 * index}."
        if index % 2:
            messages = templates.pointwise_messages(question, answer)
            reply = f"<score>{index % 5}</score>"
        else:
            messages = templates.pairwise_messages(question, answer, f"It is {2 * index + 1}.")
            reply = f"<better>{'AB'[(index // 2) % 2]}</better>"
        rows.append({"messages": messages + [{"role": "assistant", "content": reply}]})
    return rows


def processes_mentioning(text: str) -> list[int]:
    """Ids of the running processes whose command line contains `text`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command_line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command_line:
            pids.append(int(proc.name))
    return pids
