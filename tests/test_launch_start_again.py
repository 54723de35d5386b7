"""The launch starts a command again when its start fails in a way a busy machine causes (a local GRPO run whose
new Ray node did not register in time: CI runs failed so with nothing wrong but the load), and only then."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

from ray._private import node

from training.launch import ray_cluster
from training.launch.core import run_commands
from training.launch.recipe import Command, StartAgain

MARKER = "the stand-in did not start in time"


def stand_in(tmp_path: Path, failed_starts: int, output: str = MARKER, starts: int = 3) -> tuple[Command, Path]:
    """A train command that fails with `output` at its first `failed_starts` starts, then succeeds; each start is
    counted in the file returned."""
    starts_file = tmp_path / "starts"
    script = (
        "import pathlib, sys\n"
        f"counter = pathlib.Path({str(starts_file)!r})\n"
        "started = len(counter.read_text()) if counter.exists() else 0\n"
        "counter.write_text('x' * (started + 1))\n"
        f"if started < {failed_starts}:\n"
        f"    print({output!r}, flush=True)\n"
        "    sys.exit(1)\n"
    )
    argv = [sys.executable, "-c", script]
    return Command("train", argv, start_again=StartAgain(MARKER, "the stand-in timed out", starts)), starts_file


def export_stand_in(tmp_path: Path) -> tuple[Command, Path]:
    ran = tmp_path / "exported"
    return Command("export", [sys.executable, "-c", f"open({str(ran)!r}, 'w').close()"]), ran


def test_a_start_that_fails_with_the_marker_is_started_again_until_it_succeeds(tmp_path, capsys):
    train, starts = stand_in(tmp_path, failed_starts=2)
    export, exported = export_stand_in(tmp_path)
    assert run_commands([train, export], {}, tmp_path / "train.log", "run_test.sh") == 0
    assert len(starts.read_text()) == 3 and exported.exists()
    notes = capsys.readouterr().err
    assert "[run_test.sh] train: the stand-in timed out; starting it again (2 of 3)" in notes
    assert "starting it again (3 of 3)" in notes and "failed" not in notes
    assert "train started again (3 of 3)" in (tmp_path / "train.log").read_text()


def test_the_starts_are_bounded_and_the_last_failure_is_the_launchs(tmp_path, capsys):
    train, starts = stand_in(tmp_path, failed_starts=5)
    export, exported = export_stand_in(tmp_path)
    assert run_commands([train, export], {}, tmp_path / "train.log", "run_test.sh") == 1
    assert len(starts.read_text()) == 3 and not exported.exists()
    assert "[run_test.sh] train failed with exit code 1" in capsys.readouterr().err


def test_any_other_failure_is_not_started_again(tmp_path, capsys):
    train, starts = stand_in(tmp_path, failed_starts=1, output="Traceback: a real error")
    assert run_commands([train], {}, tmp_path / "train.log", "run_test.sh") == 1
    assert len(starts.read_text()) == 1
    assert "starting it again" not in capsys.readouterr().err


def test_the_marker_is_what_the_installed_ray_raises_when_a_new_node_does_not_register():
    source = inspect.getsource(node.Node.__init__)
    assert "raylet_start_wait_time_s = 30" in source
    assert ray_cluster.LOCAL_START_AGAIN.marker in source
