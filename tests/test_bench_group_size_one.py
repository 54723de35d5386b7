"""Benchmark 8 (our server at group size 1 vs a bare forward) end to end in its smoke form: the tiny scalar
judge, 1 repetition of 8 items.

It checks what the benchmark measures and how it summarizes it (both methods on the same texts, the same
rewards, real tokens counted, the ratio and its target), not how fast anything is.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_group_size_one
from tests.test_bench_server_adapter import run_benchmark

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def results(tiny_model_dir, tmp_path_factory) -> dict:
    results_dir = tmp_path_factory.mktemp("bench_group_size_one")
    run_benchmark(
        "benchmarks.bench_group_size_one", results_dir, "--base-model", str(tiny_model_dir), "--name", "smoke"
    )
    report = (results_dir / "smoke.md").read_text()
    assert "| server |" in report and "Target: server >= 0.85x" in report
    return json.loads((results_dir / "smoke.json").read_text())


def test_both_methods_score_the_same_real_tokens_alike(results, tiny_tokenizer):
    methods = results["results"]
    assert list(methods) == [bench_group_size_one.BARE, bench_group_size_one.SERVER]
    bare, server = (methods[name]["runs"] for name in methods)
    assert len(bare) == len(server) == 1 and results["config"]["items"] == 8
    bodies = bench_group_size_one.traffic(1, 8, seed="0-0-1")  # the first repetition's texts
    tokens = sum(len(ids) for ids in bench_group_size_one.judge_inputs(tiny_tokenizer, bodies))
    assert bare[0]["tokens"] == server[0]["tokens"] == tokens  # real tokens, no padding counted
    assert server[0]["tokens_per_s"] == pytest.approx(tokens / server[0]["wall_s"], rel=0.01)
    assert methods["server"]["max_raw_reward_difference_from_bare"] < 1e-4
    ratio = methods["server"]["tokens_per_s"]["median"] / methods["bare forward"]["tokens_per_s"]["median"]
    assert methods["server"]["tokens_per_s_vs_bare"] == pytest.approx(ratio, abs=1e-3)


def test_every_item_is_its_own_prompt_and_texts_are_fresh_every_repetition():
    first, again = (bench_group_size_one.traffic(1, 8, seed=f"0-{repetition}-1") for repetition in (0, 1))
    assert len({body["prompt"] for body in first}) == 8
    assert not {body["prompt"] for body in first} & {body["prompt"] for body in again}
