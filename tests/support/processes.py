"""Process groups: what a test starts runs in a session of its own, so that it and everything it spawns (Ray,
vLLM's engine processes) can be found and killed as one group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def processes_in_group(group: int) -> list[str]:
    """`pid command` of every live process of a process group (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        state, _, process_group = text.rsplit(")", 1)[1].split()[:3]
        if int(process_group) == group and state != "Z":
            found.append(f"{stat.parent.name} {text.split('(', 1)[1].split(')', 1)[0]}")
    return found


def processes_left_in_group(group: int, grace_s: float) -> list[str]:
    """processes_in_group once it is empty, or after `grace_s` (what just exited or was killed may take the kernel a
    moment to clean up)."""
    deadline = time.monotonic() + grace_s
    while processes_in_group(group) and time.monotonic() < deadline:
        time.sleep(0.2)
    return processes_in_group(group)


def kill_group(group: int) -> None:
    """SIGKILL for every process left in a process group (none left: nothing to do)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def run_in_own_group(command: Sequence[str], timeout_s: float, **popen_kwargs) -> subprocess.CompletedProcess:
    """`command` to its end (text output) in a session of its own; whatever is left of its group is killed when it
    exits or passes `timeout_s` (then subprocess.TimeoutExpired is raised): killing the command alone would leave
    what it started running."""
    with subprocess.Popen(command, text=True, start_new_session=True, **popen_kwargs) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        finally:
            kill_group(process.pid)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
