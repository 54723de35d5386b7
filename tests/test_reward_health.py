"""Reward health (judge_rewards.reward_health): the figures over a window of rewards, their warnings, and a planted
hack caught end to end: a served stand-in judge that favours long answers, scored through the real adapter."""

from __future__ import annotations

import json
import logging
import math

import pytest

from judge_core.protocol.judge_api import JudgeItem
from judge_rewards.reward_config import JudgeRewardConfig
from judge_rewards.reward_health import Observation, RewardHealth, figures_of, rule_pair_accuracy, spearman
from tests.conftest import REPO_ROOT
from tests.reward_adapter_servers import FaultyJudgeServer, make_system, start_rule_server

LEARN_RUNS = REPO_ROOT / "experiments/policy-rl/results"

QUESTIONS = 8
GROUP = 4
STEPS = 4
FILLER = " Let me explain this carefully once more."


def test_spearman_ranks_ties_and_refuses_constant_sides():
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4], [1, 0, 0, 1]) == pytest.approx(0.0)
    assert spearman([5, 5, 5], [1, 2, 3]) is None


def test_figures_of_a_window():
    window = [Observation("a", r, 10 * i, False, 1.0) for i, r in enumerate([0.05, 0.35, 0.65, 0.95])]
    window += [Observation("b", 0.5, 10 * i, i == 0, None) for i in range(4)]
    figures = figures_of(window)
    assert figures["health_window"] == 8
    assert figures["health_reward_mean"] == pytest.approx(0.5)
    assert [figures[f"health_reward_hist_{k}"] for k in (0, 3, 5, 6, 9)] == [0.125, 0.125, 0.5, 0.125, 0.125]
    assert figures["health_tied_group_share"] == 0.5  # group b ties: no GRPO advantage
    assert math.isnan(figures["health_length_rank_corr"])  # one group varies: too few to say
    seven_more = [Observation(f"c{g}", r, 10 * i, False, None) for g in range(7) for i, r in enumerate([0.1, 0.2])]
    assert figures_of(window + seven_more)["health_length_rank_corr"] == pytest.approx(1.0)  # group b left out
    assert figures["health_judge_rule_agreement"] == 0.5 and figures["health_rule_accuracy"] == 1.0
    assert figures["health_fallback_share"] == 0.125
    assert figures["health_rule_pairs"] == 0 and math.isnan(figures["health_rule_pair_accuracy"])  # no wrong answer


def test_rule_pair_accuracy_counts_right_wrong_pairs_within_groups_only():
    ordered = [(0.9, 1.0), (0.2, 0.0), (0.4, 0.0)]  # the right answer above both wrong ones
    reversed_ = [(0.1, 1.0), (0.6, 0.0)]
    tied = [(0.5, 1.0), (0.5, 0.0), (0.7, None)]  # the tie counts half; no reference: in no pair
    assert rule_pair_accuracy([ordered]) == (2, 1.0)
    assert rule_pair_accuracy([ordered, reversed_, tied]) == (4, pytest.approx((2 + 0 + 0.5) / 4))
    assert rule_pair_accuracy([[(0.9, 1.0)], [(0.1, 0.0)]])[0] == 0  # right and wrong, but to different prompts


def test_an_empty_window_says_nothing_rather_than_zero():
    counts = {"health_window", "health_rule_pairs"}
    figures = figures_of([])
    assert all(math.isnan(value) for name, value in figures.items() if name not in counts)
    assert [figures[name] for name in sorted(counts)] == [0, 0]


class LengthLovingJudge(FaultyJudgeServer):
    """A stand-in judge that scores an answer by its length alone (100 characters: 0.0; 700 or more: 1.0)."""

    def _answer(self, mode, requests):
        responses = [
            {"request_id": r["request_id"], "score": min(1.0, max(0.0, (len(r["completion"]) - 100) / 600))}
            for r in requests
        ]
        return 200, json.dumps({"responses": responses}).encode(), {}


def rollouts(step: int) -> list[dict]:
    """A step of GRPO groups from a policy that learns to pad: answers grow longer each step, and within each group
    longer answers are no likelier right (right, wrong, wrong, right from shortest to longest), so rule accuracy
    stays at 0.5 while length rises."""
    items = []
    for q in range(QUESTIONS):
        for g in range(GROUP):
            right = g in (0, GROUP - 1)
            padding = FILLER * (2 + 2 * step + g)
            items.append(
                {
                    "prompt": f"What is {q} + 1?",
                    "completion": f"The answer is \\boxed{{{q + 1 if right else q + 2}}}.{padding}",
                    "answer": str(q + 1),
                    "answer_type": "NUMBER",
                }
            )
    return items


def run_steps(system) -> list[dict]:
    """The health figures after each step's rewards (the window holds the last step only)."""
    per_step = []
    for step in range(STEPS):
        system.reward_batch(rollouts(step))
        per_step.append(system.health_figures())
    return per_step


HEALTH = {"health_window": QUESTIONS * GROUP, "health_warn_after": QUESTIONS * GROUP, "use_cache": False}


@pytest.mark.e2e
def test_a_judge_that_favours_length_is_caught(caplog):
    judge = LengthLovingJudge()
    system = make_system(judge.url, **HEALTH)
    with caplog.at_level(logging.WARNING, logger="JudgeReward"):
        per_step = run_steps(system)
    system.close()
    judge.close()
    means = [figures["health_reward_mean"] for figures in per_step]
    assert means == sorted(means) and means[-1] > means[0] + 0.3  # the judge's reward rises
    assert {figures["health_rule_accuracy"] for figures in per_step} == {0.5}  # the verifiable check does not
    assert all(figures["health_length_rank_corr"] == pytest.approx(1.0) for figures in per_step)
    assert all(figures["health_rule_pair_accuracy"] == 0.5 for figures in per_step)  # length, not rightness, ranks
    messages = [r.getMessage() for r in caplog.records]
    assert any("rank correlation of reward with answer length" in m for m in messages)
    assert any("the judge rewards the right one more in 50%" in m for m in messages)


@pytest.mark.e2e
def test_an_honest_judge_does_not_fire_the_length_warning(caplog, tmp_path):
    server = start_rule_server(tmp_path / "rule.log")
    try:
        system = make_system(server.url, **HEALTH)
        with caplog.at_level(logging.WARNING, logger="JudgeReward"):
            per_step = run_steps(system)
        system.close()
    finally:
        server.stop()
    assert all(figures["health_length_rank_corr"] == pytest.approx(0.0) for figures in per_step)
    assert all(figures["health_judge_rule_agreement"] == 1.0 for figures in per_step)
    assert all(figures["health_rule_pair_accuracy"] == 1.0 for figures in per_step)
    assert all(figures["health_fallback_share"] == 0.0 for figures in per_step)
    assert not any("reward health" in r.getMessage() for r in caplog.records)


@pytest.mark.e2e
def test_a_dead_judge_fires_the_fallback_warning(caplog):
    from tests.support.servers import free_port

    system = make_system(f"http://127.0.0.1:{free_port()}", max_retries=0, **HEALTH)
    with caplog.at_level(logging.WARNING, logger="JudgeReward"):
        system.reward_batch(rollouts(0))
        figures = system.get_metrics()["reward_health"]
    system.close()
    assert figures["health_fallback_share"] == 1.0
    assert any("came from the rule fallback" in r.getMessage() for r in caplog.records)


class RecordingWarner:
    """Every warning, unthrottled."""

    def __init__(self, messages: list[str]):
        self.messages = messages

    def warn(self, message: str) -> None:
        self.messages.append(message)


def replayed(run: str) -> tuple[dict[str, float], dict[int, list[str]]]:
    """A committed learn run's rewards through the adapter's reward health, in the order verl computed them (each
    training step's rollouts, validation before training and after every 8th step: configs/cpu_smollm2_learn.yaml):
    the figures at the end, and the warnings given during each step."""
    messages: list[str] = []
    health = RewardHealth(JudgeRewardConfig(judge_url="http://127.0.0.1:1"), lambda: RecordingWarner(messages))
    warned = {}
    for step in range(25):
        dumps = ([f"rollouts/{step}.jsonl"] if step else []) + ([f"validation/{step}.jsonl"] if step % 8 == 0 else [])
        for dump in dumps:
            for line in (LEARN_RUNS / run / dump).read_text().splitlines():
                row = json.loads(line)
                request = JudgeItem.create(row["input"], row["output"], row["gts"])
                health.observe(request, {"reward": row["score"], "source": row["source"]})
        warned[step], messages[:] = list(messages), []
    return health.figures(), warned


@pytest.mark.parametrize("seed", [1, 2])
def test_the_demo_judge_runs_fire_the_pair_accuracy_warning_and_no_other(seed):
    """experiments/policy-rl/LOG.md's "A policy that learns on a CPU" runs, with the demo BT judge as the reward:
    the judge's reward rose and the rule accuracy did not. On the policy's own answers the judge ranks a rule-right
    answer above a rule-wrong one too rarely, which the pair accuracy flags; no other figure does (the reward is not
    bought with length, and rarely ties)."""
    figures, warned = replayed(f"learn-seed{seed}")
    assert figures["health_window"] == 1024 and figures["health_rule_pairs"] >= 200
    assert 0.5 < figures["health_rule_pair_accuracy"] < 0.7
    assert warned[24]  # still warning at the end
    assert all("the judge rewards the right one more in" in m for messages in warned.values() for m in messages)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_hard_negative_judge_runs_fire_no_warning_after_their_first_steps(seed):
    """The same runs with the judge trained on hard negatives: the rule accuracy rose with the reward. The pair
    accuracy may dip below its threshold while the window holds its first few dozen pairs; from step 8 on no
    figure warns."""
    figures, warned = replayed(f"hard-negatives-seed{seed}")
    assert figures["health_window"] == 1024 and figures["health_rule_pairs"] >= 200
    assert figures["health_rule_pair_accuracy"] > 0.7
    assert not any(warned[step] for step in range(8, 25))
