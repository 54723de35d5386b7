"""Benchmark result files name paths relative to the repository, never the checkout they were measured in."""

from __future__ import annotations

import math
import re
import sys

from benchmarks import common
from tests.conftest import REPO_ROOT


def a_load_stamp(value) -> bool:
    """What common.RunLog stamps a run with: the 1-minute load average before it, a finite float >= 0 of 2
    decimals (JSON keeps it so)."""
    return isinstance(value, float) and math.isfinite(value) and value >= 0 and value == round(value, 2)


# An absolute path of two components or more, not part of a URL or of a relative path.
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])/(?:[\w.-]+/)+[\w.-]*")
# Scratch and system locations that say nothing about where the repository is.
MACHINE_PATHS = ("/tmp/", "/proc/", "/dev/")


def test_results_are_written_with_repository_paths_relative(tmp_path, monkeypatch):
    monkeypatch.setattr(
        common,
        "machine",
        lambda: dict.fromkeys(["cpu", "cores", "memory_gib", "torch", "transformers", "commit", "date"], "x"),
    )
    monkeypatch.setattr(sys, "argv", ["bench.py", "--base-model", f"{REPO_ROOT}/runs/demo/models/smollm2"])
    results = {"cwd": str(REPO_ROOT), "sibling": f"{REPO_ROOT}-old/x", "scratch": "/tmp/run/x"}

    json_path, md_path = common.write_results("demo", results, f"model {REPO_ROOT}/models/tiny", out_dir=tmp_path)

    for text in (json_path.read_text(), md_path.read_text()):
        assert f"{REPO_ROOT}/" not in text
        assert "--base-model runs/demo/models/smollm2" in text
    assert '"cwd": "."' in json_path.read_text()
    assert f'"sibling": "{REPO_ROOT}-old/x"' in json_path.read_text()
    assert "model models/tiny" in md_path.read_text()


def test_recorded_results_name_no_absolute_path_outside_scratch():
    leaks = [
        f"{path.relative_to(REPO_ROOT)}: {match.group()}"
        for path in sorted((REPO_ROOT / "benchmarks" / "results").iterdir())
        for match in ABSOLUTE_PATH.finditer(path.read_text())
        if not match.group().startswith(MACHINE_PATHS)
    ]
    assert not leaks, "absolute paths in benchmark results (name them relative to the repository):\n" + "\n".join(leaks)


def test_each_run_is_stamped_with_the_1_minute_load_average_just_before_it(monkeypatch):
    loads = iter([(1.234, 7.0, 8.0), (0.5, 7.0, 8.0), (2.0, 7.0, 8.0)])
    monkeypatch.setattr(common.os, "getloadavg", lambda: next(loads))
    log = common.RunLog()
    runs = [log.start(0), log.start(0), log.start(1)]
    assert [run["load_average_1min"] for run in runs] == [1.23, 0.5, 2.0]
    assert [run["order"] for run in runs] == [0, 1, 2] and all(a_load_stamp(run["load_average_1min"]) for run in runs)
    assert common.load_averages(runs) == (
        "1-minute load average before the runs of each repetition (min-max): 1: 0.50-1.23, 2: 2.00-2.00."
    )
    assert not any(a_load_stamp(value) for value in (None, 1, float("nan"), -0.5, 0.123))
