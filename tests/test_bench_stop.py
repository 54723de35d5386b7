"""A benchmark stopped by SIGTERM (a `timeout`, a scheduler's stop) stops the judge servers it started, each in a
session of its own that no signal to the benchmark reaches, instead of leaving them running."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from serving.process_tree import descendants
from tests.conftest import REPO_ROOT

BENCHMARKS = REPO_ROOT / "benchmarks"
# What a benchmark uses to start other processes: judge servers, trainers, restartable judges.
STARTS_PROCESSES = ("subprocess", "start_server", "benchmarks.reliability")


def serving_argv(pid: int) -> list[str] | None:
    """The command line of a live `python -m serving` process, None for any other (or no) process."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return None
    return argv if argv[1:3] == ["-m", "serving"] else None


def is_judge_server(pid: int, url: str) -> bool:
    argv = serving_argv(pid)
    return argv is not None and url.endswith(f":{argv[argv.index('--port') + 1]}")


def judge_server_of(benchmark: subprocess.Popen, timeout_s: float = 120) -> tuple[int, str]:
    """The pid and URL of the judge server the benchmark started, once it answers /health."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert benchmark.poll() is None, benchmark.communicate()[1][-3000:]
        for pid in descendants(benchmark.pid):
            if argv := serving_argv(pid):
                url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
                try:
                    if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                        return pid, url
                except httpx.TransportError:
                    pass
        time.sleep(0.2)
    raise AssertionError(f"no judge server of the benchmark answered within {timeout_s} s")


@pytest.mark.e2e
def test_sigterm_stops_the_judge_server_a_benchmark_started(tmp_path):
    command = [sys.executable, "-m", "benchmarks.bench_adapter", "--results-dir", str(tmp_path)]  # rule judge, ~1 min
    benchmark = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    server = None
    try:
        server, url = judge_server_of(benchmark)
        benchmark.send_signal(signal.SIGTERM)
        assert benchmark.wait(60) == 128 + signal.SIGTERM
        # The server's process, not its port: another test's server (pytest-xdist) may reuse the freed port.
        assert not is_judge_server(server, url), f"the judge server {server} still runs"
    finally:
        benchmark.kill()
        benchmark.communicate()
        if server is not None:  # its own session: its group is the server and what it started
            subprocess.run(["kill", "-KILL", "--", f"-{server}"], check=False, capture_output=True)


def calls_in_main(path: Path) -> list[str]:
    """The names of the functions main() calls directly, in order."""
    main = next(node for node in ast.parse(path.read_text()).body if getattr(node, "name", None) == "main")
    return [
        node.value.func.id
        for node in main.body
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
    ]


@pytest.mark.parametrize(
    "path",
    [
        path
        for path in sorted(BENCHMARKS.glob("*.py"))
        if "def main(" in path.read_text() and any(word in path.read_text() for word in STARTS_PROCESSES)
    ],
    ids=lambda path: path.name,
)
def test_every_benchmark_that_starts_processes_exits_through_its_cleanup_on_sigterm(path):
    assert calls_in_main(path)[:1] == ["exit_on_sigterm"]
