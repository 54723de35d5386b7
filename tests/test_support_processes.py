"""tests/support/processes.py: a command run in its own group leaves nothing running, ended or timed out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import processes_left_in_group, run_in_own_group


def leaves_a_child(pid_file: Path, then: str) -> list[str]:
    """A command that writes its pid, starts a child that would outlive it (as an engine's worker outlives a killed
    server), then runs `then`."""
    start = f"import os, subprocess, sys, time; open({str(pid_file)!r}, 'w').write(str(os.getpid()))"
    return [sys.executable, "-c", f"{start}; subprocess.Popen(['sleep', '300']); {then}"]


def test_what_a_finished_command_left_running_is_killed(tmp_path):
    result = run_in_own_group(leaves_a_child(tmp_path / "pid", "sys.exit(3)"), 60)
    assert result.returncode == 3
    assert processes_left_in_group(int((tmp_path / "pid").read_text()), grace_s=5) == []


def test_a_command_past_its_timeout_is_killed_with_its_group(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired, match=r"timed out after [\d.]+ seconds"):
        run_in_own_group(leaves_a_child(tmp_path / "pid", "time.sleep(30)"), 3)
    assert processes_left_in_group(int((tmp_path / "pid").read_text()), grace_s=5) == []
