"""Benchmark 5 (expected-score memory: the server's candidate recorder vs generate's output_logits) end to end in
its smoke form on the tiny model: what it measures and how it summarizes it, not how much memory anything takes."""

from __future__ import annotations

import json

import pytest

from tests.test_bench_server_adapter import check_stamps, check_summary, in_rotation, run_benchmark

pytestmark = pytest.mark.e2e

METHODS = ["recorder", "output_logits"]


@pytest.fixture(scope="module")
def results(tiny_model_dir, tmp_path_factory) -> dict:
    results_dir = tmp_path_factory.mktemp("bench_memory")
    run_benchmark("benchmarks.bench_expected_score_memory", results_dir, "--base-model", str(tiny_model_dir))
    assert "| output_logits |" in (results_dir / "expected_score_memory.md").read_text()
    return json.loads((results_dir / "expected_score_memory.json").read_text())


def test_both_methods_alternate_and_read_the_same_log_probabilities(results):
    settings, methods = results["settings"], results["methods"]
    assert (settings["rows"], settings["new_tokens"], settings["repetitions"]) == (4, 16, 2)
    runs = sorted((run for method in METHODS for run in methods[method]["runs"]), key=lambda run: run["order"])
    check_stamps(runs)
    by_repetition = [[run for run in runs if run["repetition"] == repetition] for repetition in range(2)]
    assert [[run["method"] for run in rep] for rep in by_repetition] == [in_rotation(METHODS, r) for r in range(2)]
    assert {(tuple(run["logprobs_shape"]), run["logprobs_sum"]) for run in runs} == {
        ((4, 16, 5), runs[0]["logprobs_sum"])
    }


def test_results_are_medians_and_ratios_of_medians(results):
    methods = results["methods"]
    for method in METHODS:
        for key in ("peak_above_start_mib", "generate_s"):
            check_summary(methods[method], methods[method]["runs"], key)
            ratio = methods[method][key]["median"] / methods["output_logits"][key]["median"]
            assert methods[method][f"{key}_vs_output_logits"] == pytest.approx(ratio, abs=1e-3)
