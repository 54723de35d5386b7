"""Benchmark 3 (BT training throughput vs TRL) end to end in its smoke mode: the tiny model, the offline pairs.

It checks that the benchmark measures (every method, its steps, tokens and padding), not how fast anything is.
One thread per process, as in every launcher test: a second one on a busy 2-core machine slows a run many times.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

METHODS = ("bt_trainer", "bt_trainer_fsdp1", "trl", "pad_to_max_length")


@pytest.fixture(scope="module")
def smoke_results(tiny_model_dir, tmp_path_factory) -> dict:
    pytest.importorskip(
        "trl", reason="TRL is not installed: the benchmark needs the bench extra (pip install -e '.[bench]')"
    )
    root = tmp_path_factory.mktemp("bench_bt")
    subprocess.run(
        [sys.executable, "-m", "data_prep", "offline", "--out", str(root / "data")],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_bt_throughput",
            "--base-model",
            str(tiny_model_dir),
            "--data",
            str(root / "data"),
            "--smoke",
            "--threads",
            "1",
            "--results-dir",
            str(root / "results"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    table = (root / "results" / "bt_throughput.md").read_text()
    assert all(f"| {name}: " in table for name in METHODS), table
    return json.loads((root / "results" / "bt_throughput.json").read_text())


def test_every_method_is_measured_with_positive_throughput(smoke_results):
    config, results = smoke_results["config"], smoke_results["results"]
    assert sorted(results) == sorted(METHODS)
    for name in METHODS:
        result = results[name]
        assert (result["steps"], result["timed_steps"]) == (config["steps"], config["steps"] - config["warmup_steps"])
        for key in ("s_per_step", "real_tokens_per_s", "processed_tokens_per_s", "real_tokens_per_s_vs_trl"):
            assert result[key] > 0, (name, key)
        assert 0 <= result["padding_share"] <= 1, name
        assert result["processed_tokens_per_s"] >= result["real_tokens_per_s"], name
    assert results["trl"]["real_tokens_per_s_vs_trl"] == 1
    assert config["trl"] and config["threads"] == 1


def test_every_method_trains_on_the_same_tokens_and_pads_as_it_claims(smoke_results):
    config, results = smoke_results["config"], smoke_results["results"]
    real = {name: [step["real_tokens"] for step in results[name]["per_step"]] for name in METHODS}
    assert all(real[name] == real["trl"] for name in METHODS)
    padded = [step["computed_tokens"] for step in results["pad_to_max_length"]["per_step"]]
    assert padded == [config["batch_size"] * 2 * config["max_length"]] * config["steps"]
    # Sorting a step's pairs by length before cutting micro-batches never computes more positions than
    # TRL's micro-batches of the same pairs in their order.
    for name in ("bt_trainer", "bt_trainer_fsdp1"):
        for ours, trl in zip(results[name]["per_step"], results["trl"]["per_step"], strict=True):
            assert ours["computed_tokens"] <= trl["computed_tokens"]
    assert results["bt_trainer"]["padding_share"] < results["pad_to_max_length"]["padding_share"]
