"""Running the recipe launchers, through bash as a user does or through their Python core, and reading what
they log."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from tests.conftest import REPO_ROOT
from training.launch.core import Composition, compose_launch, launch, parse_arguments
from training.launch.registry import RECIPES as LAUNCH_RECIPES
from training.launch.script import read_launcher_script

RECIPES = REPO_ROOT / "cookbooks" / "training_judge_model"
SFT_LAUNCHER = RECIPES / "sft" / "run_sft_rm.sh"
BT_LAUNCHER = RECIPES / "bradley-terry" / "run_bt_rm.sh"
ATTRIBUTE_LAUNCHER = RECIPES / "multi-aspect" / "run_attribute_rm.sh"
# Knobs a test sets only where it means to: a value in the caller's environment would win over a config file.
_LAUNCHER_ENV_PREFIXES = (
    "MODEL_PATH",
    "TRAIN_",
    "VAL_",
    "SAVE_",
    "MICRO_",
    "MAX_",
    "LR",
    "TOTAL_",
    "EXPORT_",
    "DEVICE",
    "N_GPUS",
    "NNODES",
    "NODE_RANK",
    "MASTER_",
    "LOGGER",
    "STRATEGY",
    "MARGIN",
    "TEST_FREQ",
    "TRUNCATION",
)


def launcher_env(**knobs) -> dict[str, str]:
    """The environment of a launcher run: this venv's torchrun / python first on PATH, one thread per process
    (the tiny model gains nothing from more, and a second thread on a busy 2-core machine slows a run many
    times over), and `knobs`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(_LAUNCHER_ENV_PREFIXES)}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.update({key: str(value) for key, value in knobs.items()})
    return env


def run_launcher(
    script: Path, *args: str, cwd: Path | None = None, timeout: int = 600, **knobs
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args],
        cwd=cwd or REPO_ROOT,
        env=launcher_env(**knobs),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def knob_arguments(script: Path, environ: Mapping[str, str]) -> list[str]:
    """What the launcher's command passes for its knobs: `key=value`, value as bash's ${NAME:-default} gives it."""
    return [f"{knob.key}={environ.get(knob.name) or knob.default}" for knob in read_launcher_script(script).knobs]


def launch_in_process(script: Path, *args: str, **knobs) -> int:
    """The launcher's `exec python -m training.launch ...`, run in this process (no bash, no new interpreter)."""
    env = launcher_env(**knobs)
    recipe = read_launcher_script(script).recipe
    return launch([recipe, str(script), *knob_arguments(script, env), *args], LAUNCH_RECIPES, env)


def composed(script: Path, *args: str, **knobs) -> Composition:
    """The final config a launcher call would run, with the source of each value."""
    env = launcher_env(**knobs)
    launcher = read_launcher_script(script)
    recipe = LAUNCH_RECIPES[launcher.recipe]
    return compose_launch(recipe, launcher.knobs, knob_arguments(script, env), parse_arguments(list(args)), env)


def pretend_flash_attention(monkeypatch, installed: bool) -> None:
    """Whether the launcher finds flash-attn (this machine has none; a GPU machine may have it)."""
    monkeypatch.setattr("training.launch.device.flash_attention_installed", lambda: installed)


def logged_metrics(log_text: str) -> dict[int, dict[str, float]]:
    """verl's console lines `step:N - key:value - ...` of a log, merged per step."""
    steps: dict[int, dict[str, float]] = {}
    for match in re.finditer(r"step:(\d+) - ([^\r\n]*)", log_text):
        metrics = steps.setdefault(int(match.group(1)), {})
        for item in match.group(2).split(" - "):
            key, _, value = item.partition(":")
            try:
                metrics[key.strip()] = float(value)
            except ValueError:
                continue
    return steps


def judge_spec(model_dir: Path) -> dict:
    return json.loads((model_dir / "judge.json").read_text())


def arithmetic_conversations(count: int, seed: int) -> list[tuple[list[dict], str, str]]:
    """(prompt messages, a right answer, an evasive answer): a preference even a random tiny model learns."""
    rng = random.Random(seed)
    conversations = []
    for _ in range(count):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        conversations.append(
            ([{"role": "user", "content": f"What is {a} + {b}?"}], f"The answer is {a + b}.", "I do not know.")
        )
    return conversations


def write_pair_files(out_dir: Path, train: int = 64, val: int = 16) -> tuple[Path, Path]:
    """bradley_terry/{train,val}.parquet of arithmetic pairs, with margins 1-3."""
    paths = []
    for split, count, seed in (("train", train, 0), ("val", val, 1)):
        rows = [
            {
                "chosen": json.dumps(prompt + [{"role": "assistant", "content": good}]),
                "rejected": json.dumps(prompt + [{"role": "assistant", "content": bad}]),
                "margin": float(1 + index % 3),
            }
            for index, (prompt, good, bad) in enumerate(arithmetic_conversations(count, seed))
        ]
        paths.append(out_dir / f"{split}.parquet")
        pd.DataFrame(rows).to_parquet(paths[-1])
    return paths[0], paths[1]


def write_message_files(out_dir: Path, train: int = 32, val: int = 8) -> tuple[Path, Path]:
    """sft/{train,val}.parquet: `messages` of arithmetic questions with the right answer."""
    paths = []
    for split, count, seed in (("train", train, 0), ("val", val, 1)):
        rows = [
            {"messages": prompt + [{"role": "assistant", "content": good}]}
            for prompt, good, _ in arithmetic_conversations(count, seed)
        ]
        paths.append(out_dir / f"{split}.parquet")
        pd.DataFrame(rows).to_parquet(paths[-1])
    return paths[0], paths[1]


def placeholder_inputs(tmp_path: Path) -> dict[str, str]:
    """Knobs naming a placeholder model folder and data files: a dry run only checks that they exist."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for name in ("train.parquet", "val.parquet"):
        (tmp_path / name).touch()
    return {
        "MODEL_PATH": str(model),
        "TRAIN_FILE": str(tmp_path / "train.parquet"),
        "VAL_FILE": str(tmp_path / "val.parquet"),
        "SAVE_DIR": str(tmp_path / "run"),
    }
