"""Benchmark 10 (verl's padded forwards vs the CPU-mode shortcuts) end to end in its smoke form: the tiny model,
the offline data, 1 repetition of 2 rows.

It checks that every stage ran both methods on the same batch and that their results agree, not how fast
anything is.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import bench_padded_forwards
from tests.conftest import REPO_ROOT
from tests.test_bench_server_adapter import run_benchmark

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def results(tiny_model_dir, tmp_path_factory) -> dict:
    data = tmp_path_factory.mktemp("offline_data")
    subprocess.run(
        [sys.executable, "-m", "data_prep", "offline", "--out", str(data)], cwd=REPO_ROOT, check=True, timeout=300
    )
    results_dir = tmp_path_factory.mktemp("bench_padded_forwards")
    run_benchmark(
        "benchmarks.bench_padded_forwards",
        results_dir,
        *("--model", str(tiny_model_dir), "--data", str(data), "--name", "smoke"),
        *("--sft-max-length", "512", "--max-prompt-length", "512"),  # the tiny tokenizer's texts are longer
    )
    assert "| generation |" in (results_dir / "smoke.md").read_text()
    return json.loads((results_dir / "smoke.json").read_text())


def test_every_stage_runs_both_methods_and_they_agree(results):
    stages = results["results"]
    assert list(stages) == list(bench_padded_forwards.STAGES)
    for stage, result in stages.items():
        methods = result["methods"]
        assert list(methods) == [bench_padded_forwards.VERL, bench_padded_forwards.SHORTCUT], stage
        assert [len(method["runs"]) for method in methods.values()] == [1, 1], stage
    assert stages["sft step"]["largest_difference"] < 1e-4
    assert stages["actor step"]["largest_difference"] < 1e-4
    assert stages["generation"]["largest_difference"] == 0


def test_validation_generation_compares_one_call_with_the_rollouts_chunks(results):
    """16 val prompts of 512 + 64 tokens: one generate() call against two (8192 tokens hold 14)."""
    runs = results["results"]["validation generation"]["methods"]
    assert results["config"]["val_prompts"] == 16
    assert [run["calls"] for run in runs[bench_padded_forwards.VERL]["runs"]] == [1]
    assert [run["calls"] for run in runs[bench_padded_forwards.SHORTCUT]["runs"]] == [2]
