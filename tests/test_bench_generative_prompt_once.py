"""Benchmark 7 (a generative judge: prompt-once vs today's batching) end to end in its smoke form: the tiny model
as the judge, 2 repetitions, group sizes 1 and 4, without vLLM (its CPU build refuses the tiny model's head size).

It checks what the benchmark measures and how it summarizes it (the methods interleaved and rotated per
repetition, both servers answering alike, the figures of every run), not how fast anything is.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_generative_prompt_once as bench
from benchmarks.common import rotated
from tests.test_bench_results import a_load_stamp
from tests.test_bench_server_adapter import run_benchmark

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def results(tiny_model_dir, tmp_path_factory) -> dict:
    results_dir = tmp_path_factory.mktemp("bench_generative_prompt_once")
    run_benchmark(bench.__name__, results_dir, "--judge", str(tiny_model_dir), "--name", "smoke")
    assert "| 4 | prompt-once |" in (results_dir / "smoke.md").read_text()
    return json.loads((results_dir / "smoke.json").read_text())


def test_the_methods_are_interleaved_and_answer_alike(results):
    levels = {level["group_size"]: level for level in results["results"]}
    assert sorted(levels) == [1, 4] and results["config"]["max_new_tokens"] == bench.MAX_NEW_TOKENS
    orders = sorted(run["order"] for level in levels.values() for m in level["methods"].values() for run in m["runs"])
    assert orders == list(range(2 * 2 * 2))  # 2 repetitions x 2 group sizes x 2 methods, one at a time
    for repetition in range(2):
        runs = levels[4]["methods"].items()
        first = [method for method, _ in sorted(runs, key=lambda item: item[1]["runs"][repetition]["order"])]
        assert first == rotated([bench.TODAY, bench.PROMPT_ONCE], repetition)
    for level in levels.values():
        once = level["methods"][bench.PROMPT_ONCE]
        assert (once["answers_differing_from_reference"], once["max_score_difference_from_reference"]) == (0, 0.0)
        for run in once["runs"]:
            # The random tiny model never answers in format: every generation runs to the limit.
            assert (run["parsed_share"], run["mean_generated_tokens"]) == (0.0, bench.MAX_NEW_TOKENS)
            assert run["judgements_per_s"] > 0 and a_load_stamp(run["load_average_1min"])


def test_answers_that_differ_are_counted():
    answer = {"score": 0.5, "error": None, "explanation": "ok", "metadata": {"judge_score": 2, "generated_tokens": 9}}
    other = {**answer, "score": 0.75, "metadata": {"judge_score": 3, "generated_tokens": 9}}
    failed = {"score": None, "error": "unparsable", "explanation": "", "metadata": {"generated_tokens": 64}}
    figures = bench.run_figures([answer, other, failed], [answer, answer, failed])
    assert figures == {
        "mean_generated_tokens": 27.3,
        "parsed_share": 0.667,
        "answers_differing_from_reference": 1,
        "max_score_difference_from_reference": 0.25,
    }


def test_a_pairwise_judgement_counts_the_tokens_of_both_orders():
    answer = {"score": 0.5, "error": None, "explanation": "", "metadata": {"generated_tokens": [64, 60]}}
    assert bench.run_figures([answer], [answer])["mean_generated_tokens"] == 124
