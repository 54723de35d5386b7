"""Helpers of the GRPO recipe tests (judges and the policy): run the launchers through bash as a user would or
their Python side in process, start a Ray head, and build verl RL parquet in the format data_prep writes
(prompt built by judge_rewards.protocol.templates, JSON ground truth)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import DictConfig

from judge_rewards.protocol import templates
from tests.conftest import REPO_ROOT
from tests.launcher_helpers import composed
from tests.launcher_helpers import launcher_env as recipe_env
from tests.support.servers import free_port
from training.launch.recipe import Command, LaunchError
from training.launch.registry import RECIPES
from training.launch.script import read_launcher_script

COOKBOOK = REPO_ROOT / "cookbooks" / "training_judge_model"
GRPO_DIR = COOKBOOK / "grpo"
POLICY_LAUNCHER = REPO_ROOT / "cookbooks" / "rl_with_judge_reward" / "run_policy_grpo.sh"
LAUNCHERS = {
    "pointwise": GRPO_DIR / "pointwise" / "run_pointwise.sh",
    "pairwise": GRPO_DIR / "pairwise" / "run_pairwise.sh",
    "policy": POLICY_LAUNCHER,
}
REWARD_FUNCTIONS = {"pointwise": "compute_pointwise_score", "pairwise": "compute_pairwise_score"}
DATA_SOURCE = "judge_test"
# What a test environment must not inherit: a judge key, a Ray address or a CPU dtype of the caller's shell.
OUTSIDE_SETTINGS = ("JUDGE_MODEL_API_KEY", "RAY_ADDRESS", "JUDGE_CPU_DTYPE")


def launcher_env(**knobs) -> dict[str, str]:
    """The recipes' test environment without any GRPO knob the caller's environment may carry, plus `knobs`."""
    env = recipe_env()
    for script in LAUNCHERS.values():
        for knob in read_launcher_script(script).knobs:
            env.pop(knob.name, None)
    for name in OUTSIDE_SETTINGS:
        env.pop(name, None)
    env.update({key: str(value) for key, value in knobs.items()})
    return env


def run_launcher(mode: str, *args: str, env: dict[str, str], cwd: Path = GRPO_DIR) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(LAUNCHERS[mode]), *args], cwd=cwd, env=env, text=True, capture_output=True, timeout=120
    )


def dry_run_commands(result: subprocess.CompletedProcess) -> list[list[str]]:
    """The commands a --dry-run printed, one argument list per line before the settings table."""
    assert result.returncode == 0, result.stderr
    commands = result.stdout.split("\n\n", 1)[0]
    return [shlex.split(line) for line in commands.splitlines() if line.strip()]


@dataclass
class Launch:
    """What a launcher call resolves to: the final config (prepared and validated), its notes and commands."""

    config: DictConfig
    notes: list[str]
    commands: list[Command]

    def command(self, name: str) -> list[str] | None:
        return next((command.argv for command in self.commands if command.name == name), None)


def launch_in_python(mode: str, *args: str, env: dict[str, str], monkeypatch) -> Launch:
    """The launcher's composition, prepare, validate and commands in this process (no bash, no new interpreter);
    `env` becomes the process environment, as the launcher's would be. Raises LaunchError as the launcher stops."""
    for name in list(os.environ):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    script = LAUNCHERS[mode]
    composition = composed(script, *args, **env)
    recipe = RECIPES[read_launcher_script(script).recipe]
    notes = recipe.prepare(composition.config, composition.key_names, composition.given)
    recipe.validate(composition.config, composition.key_names)
    snapshot_dir = Path(composition.config.trainer.default_local_dir) / "launch"
    return Launch(composition.config, notes, recipe.commands(composition.config, snapshot_dir))


def launch_error(mode: str, *args: str, env: dict[str, str], monkeypatch) -> str:
    """The message a launcher call stops with."""
    with pytest.raises(LaunchError) as raised:
        launch_in_python(mode, *args, env=env, monkeypatch=monkeypatch)
    return str(raised.value)


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


def judge_sft_rows(mode: str, count: int) -> list[dict]:
    """SFT conversations of one mode that end in a well-formed judge answer (no reasoning) whose value does not
    follow from the question: a model trained on them answers in format with a value it has to guess."""
    rows = []
    for index in range(count):
        question, answer = f"What is {index} + {index}?", f"It is {2 * index}."
        if mode == "pointwise":
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


@contextlib.contextmanager
def ray_head(ray_tmpdir: str, *resource_flags: str):
    """`ray start --head --block` on loopback with `resource_flags` (e.g. --num-gpus=1); yields its dashboard
    address and stops every process of it afterwards."""
    dashboard = f"http://127.0.0.1:{free_port()}"
    ports = {
        "--port": free_port(),
        "--dashboard-port": dashboard.rsplit(":", 1)[1],
        "--dashboard-agent-listen-port": free_port(),
        "--ray-client-server-port": free_port(),
    }
    command = [
        "ray",
        "start",
        "--head",
        "--block",
        "--dashboard-host=127.0.0.1",
        *resource_flags,
        f"--temp-dir={ray_tmpdir}/cluster",
        "--disable-usage-stats",
        *(f"{flag}={port}" for flag, port in ports.items()),
    ]
    env = {**launcher_env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    cluster = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        _wait_for_dashboard(dashboard, cluster)
        yield dashboard
    finally:
        cluster.send_signal(signal.SIGTERM)  # `ray start --block` stops its processes on SIGTERM
        try:
            cluster.wait(60)
        finally:
            kill_group(cluster.pid)


def _wait_for_dashboard(address: str, cluster: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert cluster.poll() is None, "ray start exited"
        try:
            urllib.request.urlopen(f"{address}/api/version", timeout=2)
            return
        except urllib.error.HTTPError:  # 401: token authentication, but it answers
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"no Ray dashboard at {address} after {timeout_s} s")


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def stand_in_dashboard(nodes: list[dict] | None):
    """An HTTP server answering like a Ray dashboard whose nodes declare `nodes` (None: 401 to everything, as a
    cluster with token authentication answers a request without the token)."""

    class Dashboard(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if nodes is None:
                self.send_response(401)
                self.end_headers()
                return
            listed = [{"state": "ALIVE", "resources_total": resources} for resources in nodes]
            body = {"data": {"result": {"result": listed}}} if self.path.startswith("/api/v0/nodes") else {}
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())

        def log_message(self, *args):
            pass

    return http.server.HTTPServer(("127.0.0.1", 0), Dashboard)
