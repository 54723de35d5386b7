"""Benchmark 3 (BT training throughput vs TRL) end to end in its smoke mode: the tiny model, HelpSteer2-like pairs.

It checks that the benchmark measures (every method, its runs and steps, the tokens each computed, counted
here independently of the benchmark), not how fast anything is.
One thread per process, as in every launcher test: a second one on a busy 2-core machine slows a run many times.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from benchmarks import bench_bt_throughput
from tests.conftest import REPO_ROOT
from tests.test_bench_results import a_load_stamp

pytestmark = pytest.mark.e2e

METHODS = ("bt_packed", "bt_padded", "trl")
SMOKE_TIMEOUT_S = 900  # about 1 min alone; a slow 2-core machine running the framework tests beside it took over 400 s


@pytest.fixture(scope="module")
def smoke_results(tiny_model_dir, tmp_path_factory) -> dict:
    pytest.importorskip(
        "trl", reason="TRL is not installed: the benchmark needs the bench extra (pip install -e '.[bench]')"
    )
    root = tmp_path_factory.mktemp("bench_bt")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_bt_throughput",
            "--base-model",
            str(tiny_model_dir),
            "--smoke",
            "--threads",
            "1",
            "--results-dir",
            str(root / "results"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_S,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    table = (root / "results" / "bt_throughput.md").read_text()
    assert all(f"| {name}: " in table for name in METHODS), table
    return json.loads((root / "results" / "bt_throughput.json").read_text())


@pytest.fixture(scope="module")
def pair_tokens(tiny_model_dir, smoke_results) -> tuple[int, int]:
    """The benchmark's pairs counted here, independently: tokens of both sides, and useful tokens (the
    common prefix once, each side keeping at least its last token)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    frame = bench_bt_throughput.helpsteer2_like_pairs(smoke_results["config"]["pairs"], smoke_results["config"]["seed"])
    real = useful = 0
    for chosen, rejected in zip(frame.chosen, frame.rejected, strict=True):
        a, b = (
            tokenizer(tokenizer.apply_chat_template(json.loads(side), tokenize=False), add_special_tokens=False)[
                "input_ids"
            ]
            for side in (chosen, rejected)
        )
        common = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        real += len(a) + len(b)
        useful += len(a) + len(b) - min(common, len(a) - 1, len(b) - 1)
    return real, useful


def test_every_method_is_measured_over_the_same_tokens(smoke_results, pair_tokens):
    config, results = smoke_results["config"], smoke_results["results"]
    real, useful = pair_tokens
    assert useful < real, "the pairs share prompts"
    assert sorted(results) == sorted(METHODS)
    for name in METHODS:
        runs = results[name]["runs"]
        assert len(runs) == config["repetitions"] >= 2, name
        for run in runs:
            assert (run["steps"], run["timed_steps"]) == (config["steps"], config["steps"] - config["warmup_steps"])
            assert sum(step["real_tokens"] for step in run["per_step"]) == real, name
            assert sum(step["useful_tokens"] for step in run["per_step"]) == useful, name
            assert a_load_stamp(run["load_average_1min"])
    for run in results["bt_packed"]["runs"]:
        assert [step["computed_tokens"] for step in run["per_step"]] == [
            step["useful_tokens"] for step in run["per_step"]
        ]
        assert run["waste_share"] == 0
    for name in ("bt_padded", "trl"):  # padded: every side whole (the prompt twice), and padding
        for run in results[name]["runs"]:
            assert all(step["computed_tokens"] >= step["real_tokens"] for step in run["per_step"]), name
    assert config["trl"] and config["threads"] == 1


def test_throughputs_are_the_timed_steps_tokens_over_their_time_and_ratios_of_medians(smoke_results):
    config, results = smoke_results["config"], smoke_results["results"]
    for name in METHODS:
        speeds = []
        for run in results[name]["runs"]:
            timed = run["per_step"][config["warmup_steps"] :]
            speed = sum(step["useful_tokens"] for step in timed) / sum(step["time_s"] for step in timed)
            assert run["useful_tokens_per_s"] == pytest.approx(speed, rel=1e-3), name
            speeds.append(speed)
        summary = results[name]["useful_tokens_per_s"]
        assert summary["min"] <= summary["median"] <= summary["max"]
        assert summary["median"] == pytest.approx(statistics.median(speeds), rel=1e-3)
    for name in METHODS:
        for baseline in ("trl", "bt_padded"):
            expected = (
                results[name]["useful_tokens_per_s"]["median"] / results[baseline]["useful_tokens_per_s"]["median"]
            )
            assert results[name][f"useful_tokens_per_s_vs_{baseline}"] == pytest.approx(expected, rel=1e-2)
