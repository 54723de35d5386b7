"""Benchmark result files name paths relative to the repository, never the checkout they were measured in."""

from __future__ import annotations

import re
import sys

from benchmarks import common
from tests.conftest import REPO_ROOT

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
