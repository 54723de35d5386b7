"""Helpers of the GRPO recipe tests (judges and the policy): run the launchers through bash as a user would or
their Python side in process, start a Ray head, and build verl RL parquet in the format data_prep writes
(prompt built by judge_core.protocol.templates, JSON ground truth)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import DictConfig

from judge_core.protocol import templates
from tests.conftest import REPO_ROOT
from tests.launcher_helpers import composed
from tests.launcher_helpers import launcher_env as recipe_env
from tests.support.processes import kill_group
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
RAY_STARTED = "Ray runtime started."  # what `ray start` prints once its node is up
RAY_START_ATTEMPTS = 5
RAY_START_PAUSE_S = 15  # between attempts: the load that stopped one may pass
RAY_LOGS = ("raylet.out", "dashboard_agent.log", "dashboard.log")  # a failed start's report ends with theirs
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
    """The message a launcher call stops with (each caller checks its text)."""
    try:
        launch_in_python(mode, *args, env=env, monkeypatch=monkeypatch)
    except LaunchError as raised:
        return str(raised)
    pytest.fail(f"the {mode} launcher did not stop")


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
    address and stops every process of it afterwards. On a busy 2-core machine `ray start` can exit before its
    node is up: its raylet waits at most 15 s for its dashboard agent (a Python process) to start, then stops;
    Ray gives the raylet a fixed 30 s to register, and its Ray Client server as long to read the node's info. It is
    started again then, RAY_START_PAUSE_S later, up to RAY_START_ATTEMPTS times. A failed assertion inside says
    whether the cluster was still up, with the ends of `ray start`'s output and of its RAY_LOGS (every failed
    attempt's)."""
    output = Path(ray_tmpdir) / "ray_start.log"
    reports = []
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        dashboard, client_port, cluster = _start_head(ray_tmpdir, resource_flags, output)
        try:
            _wait_for_cluster(dashboard, client_port, cluster, output)
            break
        except (AssertionError, TimeoutError) as err:
            exited = cluster.poll() is not None
            reports.append(f"[attempt {attempt}: {err}]\n{_cluster_report(cluster, output, Path(ray_tmpdir))}")
            _stop(cluster)
            if attempt == RAY_START_ATTEMPTS or not exited:
                raise AssertionError("\n".join(reports)) from None
            time.sleep(RAY_START_PAUSE_S)
    try:
        yield dashboard
    except AssertionError as err:
        raise AssertionError(f"{err}\n{_cluster_report(cluster, output, Path(ray_tmpdir))}") from None
    finally:
        _stop(cluster)


def _start_head(ray_tmpdir: str, resource_flags: tuple[str, ...], output: Path) -> tuple[str, int, subprocess.Popen]:
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
    with output.open("a") as sink:
        sink.write(f"$ {shlex.join(command)}\n")
        sink.flush()
        cluster = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    return dashboard, int(ports["--ray-client-server-port"]), cluster


def _stop(cluster: subprocess.Popen) -> None:
    cluster.send_signal(signal.SIGTERM)  # `ray start --block` stops its processes on SIGTERM (no-op once it exited)
    try:
        cluster.wait(60)
    finally:
        kill_group(cluster.pid)


def _cluster_report(cluster: subprocess.Popen, output: Path, ray_tmpdir: Path) -> str:
    state = "still running" if cluster.poll() is None else f"exited with {cluster.returncode}"
    report = f"[the Ray cluster: `ray start --block` {state}; its output ends]\n{output.read_text()[-2000:]}"
    for name in RAY_LOGS:
        log = ray_tmpdir / "cluster" / "session_latest" / "logs" / name
        lines = log.read_text(errors="replace").splitlines() if log.is_file() else ["(none)"]
        text = "\n".join(line for line in lines if not line.startswith("[state-dump]"))
        report += f"\n[its {name} ends]\n{text[-1500:]}"
    return report


def _wait_for_cluster(
    address: str, client_port: int, cluster: subprocess.Popen, output: Path, timeout_s: float = 300
) -> None:
    """Until `ray start` says the runtime started (its head node registered: over a minute after the dashboard
    answered, once, beside the vLLM tests), its Ray Client server listens (it does once it has read the node's
    info; in CI it gave up once, a second after the dashboard answered, and `ray start --block` stopped the
    cluster), and Ray's dashboard answers at `address`: a 401 (token authentication) or its version. Another
    server that took the port between free_port() and Ray's bind answers otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert cluster.poll() is None, "ray start exited"
        if RAY_STARTED not in output.read_text() or not listens(client_port):
            time.sleep(0.5)
            continue
        try:
            with urllib.request.urlopen(f"{address}/api/version", timeout=2) as response:
                if "ray_version" in json.load(response):
                    return
        except urllib.error.HTTPError as err:
            if err.code == 401:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"no Ray cluster with its dashboard at {address} after {timeout_s} s")


def listens(port: int) -> bool:
    """Whether something accepts connections at 127.0.0.1:`port`."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def stand_in_dashboard(nodes: list[dict] | None, version_delay_s: float = 0.0):
    """An HTTP server answering like a Ray dashboard whose nodes declare `nodes` (None: 401 to everything, as a
    cluster with token authentication answers a request without the token), `version_delay_s` late to GET
    /api/version (as a busy dashboard)."""

    class Dashboard(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/api/version"):
                time.sleep(version_delay_s)
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
