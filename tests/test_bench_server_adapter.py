"""Benchmarks 1 and 2 (judge server batching modes; reward adapter vs naive and verl batch clients) end to end in
their smoke forms: the tiny scalar judge and the rule judge, 2 repetitions.

They check what the benchmarks measure and how they summarize it (runs interleaved and rotated per
repetition, medians and ratios, HTTP requests counted by the server), not how fast anything is.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.test_bench_results import a_load_stamp

pytestmark = pytest.mark.e2e

SERVER_MODES = ["no batching", "batching, batch_timeout 0.05", "batching, batch_timeout 0"]


def run_benchmark(module: str, results_dir: Path, *args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", module, "--smoke", "--results-dir", str(results_dir), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]


@pytest.fixture(scope="module")
def server_results(tiny_model_dir, tmp_path_factory) -> dict:
    results_dir = tmp_path_factory.mktemp("bench_server")
    run_benchmark("benchmarks.bench_server", results_dir, "--base-model", str(tiny_model_dir), "--name", "smoke")
    assert "| no batching |" in (results_dir / "smoke.md").read_text()
    return json.loads((results_dir / "smoke.json").read_text())


@pytest.fixture(scope="module")
def adapter_results(tmp_path_factory) -> dict:
    results_dir = tmp_path_factory.mktemp("bench_adapter")
    run_benchmark("benchmarks.bench_adapter", results_dir, "--name", "smoke")
    assert "| verl batch |" in (results_dir / "smoke.md").read_text()
    return json.loads((results_dir / "smoke.json").read_text())


def in_rotation(names: list[str], repetition: int) -> list[str]:
    shift = repetition % len(names)
    return names[shift:] + names[:shift]


def check_summary(summary: dict, runs: list[dict], key: str) -> None:
    values = [run[key] for run in runs]
    assert summary[key]["min"] <= summary[key]["median"] <= summary[key]["max"], key
    assert (summary[key]["min"], summary[key]["max"]) == (min(values), max(values)), key
    assert summary[key]["median"] == pytest.approx(statistics.median(values)), key


def check_stamps(runs_in_order: list[dict]) -> None:
    """One global sequence: orders 0..n-1, start times rising with them, a load average before each."""
    assert [run["order"] for run in runs_in_order] == list(range(len(runs_in_order)))
    starts = [run["started_s"] for run in runs_in_order]
    assert starts == sorted(starts) and starts[0] == 0
    assert all(a_load_stamp(run["load_average_1min"]) for run in runs_in_order)


def test_server_modes_run_interleaved_at_every_level_in_rotated_order(server_results):
    config, levels = server_results["config"], server_results["results"]
    repetitions = config["repetitions"]
    assert repetitions == 2 and len(levels) >= 2
    runs = []
    for level in levels:
        assert list(level["modes"]) == SERVER_MODES
        for mode, result in level["modes"].items():
            assert [run["repetition"] for run in result["runs"]] == list(range(repetitions)), mode
            runs += [{**run, "mode": mode, "concurrency": level["concurrency"]} for run in result["runs"]]
    runs.sort(key=lambda run: run["order"])
    check_stamps(runs)
    expected = [
        (repetition, level["concurrency"], mode)
        for repetition in range(repetitions)
        for level in levels
        for mode in in_rotation(SERVER_MODES, repetition)
    ]
    assert [(run["repetition"], run["concurrency"], run["mode"]) for run in runs] == expected


def test_server_summaries_are_medians_of_the_runs_and_ratios_of_medians(server_results):
    for level in server_results["results"]:
        requests = level["requests"]
        assert requests == max(level["concurrency"], 8)
        baseline = level["modes"]["no batching"]["requests_per_s"]["median"]
        for mode, result in level["modes"].items():
            for key in ("requests_per_s", "p50_ms", "p99_ms", "mean_batch_size"):
                check_summary(result, result["runs"], key)
            for run in result["runs"]:
                assert run["requests_per_s"] == pytest.approx(requests / run["wall_s"], rel=0.01), mode
                assert run["mean_batch_size"] == pytest.approx(requests / run["model_calls"], abs=0.01), mode
            expected = result["requests_per_s"]["median"] / baseline
            assert result["requests_per_s_vs_no_batching"] == pytest.approx(expected, abs=1e-3), mode
        # The servers really differ as named: without batching, one model call per request.
        assert all(run["model_calls"] == requests for run in level["modes"]["no batching"]["runs"])


def test_adapter_clients_run_interleaved_latency_then_throughput_in_each_repetition(adapter_results):
    config, results = adapter_results["config"], adapter_results["results"]
    latency_names = ["raw POST /judge", *(f"adapter, batch_timeout {t}" for t in config["batch_timeouts"])]
    throughput_names = [
        "naive",
        "verl batch",
        "adapter reward_batch (verl_reward), batch_timeout 0.05",
        *(f"adapter, batch_timeout {t}" for t in config["batch_timeouts"]),
    ]
    assert list(results["added_latency"]) == latency_names
    assert list(results["throughput"]) == throughput_names
    runs = [
        {**run, "part": part, "client": name}
        for part in ("added_latency", "throughput")
        for name, result in results[part].items()
        for run in result["runs"]
    ]
    runs.sort(key=lambda run: run["order"])
    check_stamps(runs)
    expected = [
        (repetition, part, name)
        for repetition in range(config["repetitions"])
        for part, names in (("added_latency", latency_names), ("throughput", throughput_names))
        for name in in_rotation(names, repetition)
    ]
    assert [(run["repetition"], run["part"], run["client"]) for run in runs] == expected


def test_adapter_http_requests_are_counted_by_the_server(adapter_results):
    config, throughput = adapter_results["config"], adapter_results["results"]["throughput"]
    rewards, chunk = config["rewards"], config["max_batch_requests"]
    verl_batches = [min(config["verl_batch"], rewards - start) for start in range(0, rewards, config["verl_batch"])]
    expected_verl_requests = sum(math.ceil(size / chunk) for size in verl_batches)
    # The smoke sizes make per-batch chunking count: chunking all rewards at once would give fewer requests.
    assert expected_verl_requests > math.ceil(rewards / chunk)
    assert [run["http_requests"] for run in throughput["verl batch"]["runs"]] == [expected_verl_requests] * 2
    assert [run["http_requests"] for run in throughput["naive"]["runs"]] == [rewards] * 2
    for timeout in config["batch_timeouts"]:
        for run in throughput[f"adapter, batch_timeout {timeout}"]["runs"]:
            assert run["http_requests"] == run["batches_sent"] >= math.ceil(rewards / 16)
    # reward_batch queues a verl batch at once: full batches of 16 and one partial per verl batch
    fewest = sum(math.ceil(size / 16) for size in verl_batches)
    for run in throughput["adapter reward_batch (verl_reward), batch_timeout 0.05"]["runs"]:
        assert run["http_requests"] == run["batches_sent"] == fewest


def test_adapter_summaries_are_medians_of_the_runs_and_ratios_of_medians(adapter_results):
    config, results = adapter_results["config"], adapter_results["results"]
    latency = results["added_latency"]
    raw_p50 = latency["raw POST /judge"]["p50_ms"]["median"]
    for name, result in latency.items():
        check_summary(result, result["runs"], "p50_ms")
        check_summary(result, result["runs"], "p95_ms")
        assert result["added_p50_ms"] == pytest.approx(result["p50_ms"]["median"] - raw_p50, abs=0.01), name
    throughput = results["throughput"]
    for name, result in throughput.items():
        check_summary(result, result["runs"], "rewards_per_s")
        for run in result["runs"]:
            assert run["rewards_per_s"] == pytest.approx(config["rewards"] / run["wall_s"], rel=0.01), name
        for baseline, label in (("naive", "naive"), ("verl batch", "verl_batch")):
            expected = result["rewards_per_s"]["median"] / throughput[baseline]["rewards_per_s"]["median"]
            assert result[f"rewards_per_s_vs_{label}"] == pytest.approx(expected, abs=1e-3), name
