"""Benchmark 9 (group-relative rewards over /judge_group): the groups it builds and how the rule's order is compared
with the rewards, and its smoke form end to end on the tiny scalar judge (a judge that compares without
generating), 2 repetitions of 3 groups of 4. It checks what is measured and summarized, not how fast or how good."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest

from benchmarks import bench_group_rewards as bench
from benchmarks.common import rotated
from data_prep import offline
from tests.test_bench_results import a_load_stamp
from tests.test_bench_server_adapter import run_benchmark

SMALL = offline.OfflineConfig(train_size=40, val_size=20, eval_size=5)


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("offline")
    offline.generate(out, SMALL)
    return out / "policy" / "val.parquet"


@pytest.fixture(scope="module")
def rows(policy_file) -> list[dict]:
    return pd.read_parquet(policy_file).to_dict("records")


def test_answers_that_commit_to_a_value_are_decided_by_the_rule(rows):
    rng = random.Random(0)
    for row in rows:
        right, wrong, none = (bench.policy_answer(row, grade, rng) for grade in (4, 0, 1))
        value = row["reward_model"]["ground_truth"]
        assert right.endswith(f"The answer is {value}.") and not wrong.endswith(f"The answer is {value}.")
        scores = [bench.rules.score_answer(t, value, row["extra_info"]["answer_type"]).score for t in (right, wrong)]
        assert scores == [1.0, 0.0], (row["extra_info"]["prompt_id"], right, wrong)
        assert none == offline.NO_ANSWER


def test_a_group_carries_the_rows_prompt_and_the_rules_scores(rows):
    group = bench.make_group(rows[0], 8, random.Random(1))
    assert group["body"]["prompt"] == list(rows[0]["prompt"]) and len(group["body"]["completions"]) == 8
    assert group["rule_scores"] == [
        bench.rules.score_answer(
            text, rows[0]["reward_model"]["ground_truth"], rows[0]["extra_info"]["answer_type"]
        ).score
        for text in group["body"]["completions"]
    ]


def test_rank_agreement_counts_only_the_pairs_the_rule_decides():
    groups = [{"rule_scores": [1.0, 0.0, 0.0, 1.0]}, {"rule_scores": [1.0, 1.0]}]
    assert bench.rank_agreement(groups, [[0.9, 0.1, 0.2, 0.8], [0.1, 0.9]]) == (1.0, 4)
    assert bench.rank_agreement(groups, [[0.1, 0.9, 0.8, 0.2], [0.5, 0.5]]) == (0.0, 4)
    assert bench.rank_agreement(groups, [[0.5, 0.5, 0.5, 0.5], [0.5, 0.5]]) == (0.5, 4)
    # An unrewarded completion's pairs are left out; with no decided pair left there is no agreement.
    assert bench.rank_agreement(groups, [[0.9, None, 0.2, 0.1], [0.1, 0.9]]) == (0.5, 2)
    assert bench.rank_agreement(groups[1:], [[0.1, 0.9]]) == (None, 0)


def test_correct_over_wrong_compares_only_plainly_correct_and_wrong_answers():
    groups = [{"correct_or_wrong": bench.correct_or_wrong([4, 3, 0, 1, 0])}]
    assert groups[0]["correct_or_wrong"] == [1.0, None, 0.0, None, 0.0]
    assert bench.rank_agreement(groups, [[0.6, 0.9, 0.5, 0.9, 0.7]], "correct_or_wrong") == (0.5, 2)


def test_rewards_are_summed_by_grade_leaving_out_the_unrewarded():
    groups = [{"grades": [4, 0, 0]}, {"grades": [4, 1]}]
    totals = bench.rewards_by_grade(groups, [[0.75, 0.25, None], [0.25, 0.5]])
    assert totals == {4: [1.0, 2], 3: [0.0, 0], 2: [0.0, 0], 1: [0.5, 1], 0: [0.25, 1]}
    assert bench.pooled_means([totals, totals]) == {"0": 0.25, "1": 0.5, "2": None, "3": None, "4": 0.5}


def test_k_random_is_measured_only_where_it_is_cheaper_than_all_pairs():
    assert list(bench.schedules(8, 2)) == ["all_pairs", "k_random k=2"]
    assert list(bench.schedules(4, 2)) == ["all_pairs"]  # 4 x 2 draws cover up to all 6 pairs
    assert list(bench.schedules(4, 1)) == ["all_pairs", "k_random k=1"]


@pytest.mark.e2e
def test_the_smoke_run_interleaves_the_schedules_and_scores_every_group(tiny_scalar_judge_dir, policy_file, tmp_path):
    run_benchmark(
        bench.__name__,
        tmp_path,
        "--judge",
        str(tiny_scalar_judge_dir),
        "--data",
        str(policy_file),
        "--k",
        "1",
        "--name",
        "smoke",
    )
    results = json.loads((tmp_path / "smoke.json").read_text())
    assert "| 4 | all_pairs |" in (tmp_path / "smoke.md").read_text()
    (level,) = results["results"]
    methods = level["methods"]
    assert list(methods) == ["all_pairs", "k_random k=1"] and results["config"]["judge_kind"] == "scalar"
    for repetition in range(2):
        first = sorted(methods, key=lambda method: methods[method]["runs"][repetition]["order"])
        assert first == rotated(["all_pairs", "k_random k=1"], repetition)
    all_pairs = methods["all_pairs"]
    assert all_pairs["comparisons"] == 2 * 3 * 6  # repetitions x groups x pairs of 4
    for method in methods.values():
        assert (method["failed_comparisons"], method["unrewarded_completions"]) == (0, 0)
        assert method["position_consistency"] is None  # a scalar comparison has no order
        assert set(method["mean_reward_by_grade"]) == {"0", "1", "2", "3", "4"}
        for run in method["runs"]:
            assert run["completions_per_s"] > 0 and a_load_stamp(run["load_average_1min"])
            assert run["decided_pairs"] == 0 or 0.0 <= run["rank_agreement"] <= 1.0
            assert run["correct_wrong_pairs"] == 0 or 0.0 <= run["correct_over_wrong"] <= 1.0
    assert all_pairs["decided_pairs"] > 0
