"""Benchmark 6 (prompt-once vs today's batching) end to end in its smoke form: the tiny scalar judge, 2
repetitions, group sizes 1 and 4, without vLLM (its CPU build refuses the tiny model's head size).

It checks what the benchmark measures and how it summarizes it (the methods interleaved and rotated per
repetition, fresh texts, the same rewards from both servers, ratios and targets), not how fast anything is.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_prompt_once
from benchmarks.common import rotated
from tests.test_bench_server_adapter import run_benchmark

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def results(tiny_model_dir, tmp_path_factory) -> dict:
    results_dir = tmp_path_factory.mktemp("bench_prompt_once")
    run_benchmark("benchmarks.bench_prompt_once", results_dir, "--base-model", str(tiny_model_dir), "--name", "smoke")
    assert "| 4 | prompt-once |" in (results_dir / "smoke.md").read_text()
    return json.loads((results_dir / "smoke.json").read_text())


def test_groups_share_their_prompt_and_texts_are_fresh_every_repetition():
    first, again = (bench_prompt_once.traffic(4, 8, seed=f"0-{repetition}-4") for repetition in (0, 1))
    assert len({body["prompt"] for body in first}) == 2 and len({body["completion"] for body in first}) == 8
    assert [body["prompt"] for body in first[:4]] == [first[0]["prompt"]] * 4
    assert not {body["prompt"] for body in first} & {body["prompt"] for body in again}


def test_the_methods_are_interleaved_and_agree(results):
    levels = {level["group_size"]: level for level in results["results"]}
    assert sorted(levels) == [1, 4]
    orders = sorted(run["order"] for level in levels.values() for m in level["methods"].values() for run in m["runs"])
    assert orders == list(range(2 * 2 * 2))  # 2 repetitions x 2 group sizes x 2 methods, one at a time
    for repetition in range(2):
        first = [
            method
            for method, summary in sorted(
                levels[1]["methods"].items(), key=lambda item: item[1]["runs"][repetition]["order"]
            )
        ]
        assert first == rotated([bench_prompt_once.TODAY, bench_prompt_once.PROMPT_ONCE], repetition)
    for level in levels.values():
        assert level["methods"]["prompt-once"]["max_raw_reward_difference_from_today"] < 1e-4
        assert level["methods"]["today"]["rewards_per_s_vs_today"] == 1.0
    shared = levels[4]["tokens"][0]
    assert shared["computed_prompt_once"] < shared["computed_today"]
    assert levels[1]["tokens"][0]["computed_prompt_once"] == levels[1]["tokens"][0]["computed_today"]
