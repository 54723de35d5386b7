"""Start a judge server as a child process and stop it again (tests, benchmarks, evaluation runs)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.processes import kill_group

READY_LINE = "judge server"  # the startup line both servers print once they are about to serve
# vLLM judge servers starting beside the main suite: 2-3 min alone, past 7 min on a slow 2-core machine.
VLLM_STARTUP_TIMEOUT_S = 900
# Small vLLM engines on a shared 2-core machine: a 1 GiB KV cache each, one thread each, no core pinning.
SMALL_VLLM_ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the server runs this checkout, wherever it is started


@dataclass
class RunningServer:
    url: str
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout_s: float = 90) -> int:
        """SIGTERM, then SIGKILL for the whole process group if it does not exit in time; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                kill_group(self.process.pid)
                self.process.wait(timeout_s)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL for the whole process group: the server dies without answering what it holds."""
        if self.process.poll() is None:
            kill_group(self.process.pid)
            self.process.wait()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def server_python() -> str:
    """The Python the server runs in: this one, or JUDGE_SERVER_PYTHON (the framework environments' tests run the
    judge server in the main environment, apart from the trainer's)."""
    return os.environ.get("JUDGE_SERVER_PYTHON") or sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# `vllm serve`: vllm-cpu's `vllm` command asks for the version of a distribution named vllm, which it is not
VLLM_OPENAI_SERVER = "vllm.entrypoints.launchers.api_server.entry"


def start_vllm_openai_server(
    python: str, model_dir: Path, log_path: Path, port: int, flags: Sequence[str], env: dict[str, str]
) -> subprocess.Popen:
    """vLLM's OpenAI server of `model_dir` (`vllm serve`) on 127.0.0.1:`port`, in its own session, returned once
    GET /v1/models answers; an error with its log's end if it exits or is not up within VLLM_STARTUP_TIMEOUT_S."""
    command = [python, "-m", VLLM_OPENAI_SERVER, "--model", str(model_dir), *flags]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + VLLM_STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"vLLM's OpenAI server exited with {process.returncode}:\n{log_path.read_text()[-4000:]}"
            )
        if _healthy(f"http://127.0.0.1:{port}", "/v1/models"):
            return process
        time.sleep(0.5)
    kill_group(process.pid)
    process.wait()
    raise TimeoutError(
        f"vLLM's OpenAI server was not up within {VLLM_STARTUP_TIMEOUT_S} s:\n{log_path.read_text()[-4000:]}"
    )


def start_server(
    args: Sequence[str],
    log_path: Path,
    module: str = "serving",
    startup_timeout_s: float = 240,
    env: dict[str, str] | None = None,
    port: int | None = None,
    python: str | None = None,
) -> RunningServer:
    """`python -m <module> <args>` on 127.0.0.1 (a free port unless `port` is given, e.g. to restart a
    server at the URL its clients know), its output appended to `log_path`, returned once /health answers 200.
    `python`: the interpreter to run it with (default: server_python())."""
    port = port or free_port()
    command = [python or server_python(), "-m", module, *args, "--host", "127.0.0.1", "--port", str(port)]
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    with open(log_path, "ab") as log_file:
        # Own session: the server and anything it spawns (Ray) can be killed as one group.
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = RunningServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        _wait_until_ready(server, startup_timeout_s)
    except BaseException:  # a server that never became ready, or a caller stopped while it waited: not left running
        server.stop()
        raise
    return server


def _wait_until_ready(server: RunningServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the judge server exited with {server.process.returncode}:\n{server.log()[-4000:]}")
        if READY_LINE in server.log() and _healthy(server.url):
            return
        time.sleep(0.2)
    raise TimeoutError(f"the judge server was not ready within {timeout_s:.0f} s:\n{server.log()[-4000:]}")


def _healthy(url: str, path: str = "/health") -> bool:
    try:
        return httpx.get(f"{url}{path}", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def started_together(names: Sequence[str], start: Callable[[str], RunningServer]) -> Iterator[dict[str, RunningServer]]:
    """`start(name)` for every name at once (their start-ups overlap), by name; all stopped on exit, and the
    started ones stopped when another fails to start. They stop at once too (each stop waits for its engine)."""
    with ThreadPoolExecutor(len(names)) as pool:
        futures = {name: pool.submit(start, name) for name in names}
        try:
            running = {name: future.result() for name, future in futures.items()}
        except Exception:
            stop_all([future.result() for future in futures.values() if future.exception() is None])
            raise
    try:
        yield running
    finally:
        stop_all(list(running.values()))


def stop_all(servers: Sequence[RunningServer]) -> None:
    with ThreadPoolExecutor(max(len(servers), 1)) as pool:
        list(pool.map(RunningServer.stop, servers))


def batch_judge(server: RunningServer, requests: list[dict], timeout_s: float = 300) -> list[dict]:
    """The /batch_judge answers of `requests` (asserts a 200)."""
    response = httpx.post(f"{server.url}/batch_judge", json={"requests": requests}, timeout=timeout_s)
    assert response.status_code == 200, response.text
    return response.json()["responses"]
