"""POST /judge_group: group-relative rewards from a judge that compares. The schedules and the reward of planted
verdicts (a judge that prefers the longer answer ranks by length; failures are counted, never a 0.5), then real
servers: the scripted pairwise generative judge of test_serving_pairwise.py (a first-position judge gives every
completion 0.5; a good answer outranks a bad one; a broken comparison is reported) and a tiny scalar judge, whose
group rewards must be the mean of sigmoid(r_i - r_j) over its own raw rewards."""

from __future__ import annotations

import concurrent.futures
import math

import httpx
import pytest

from serving.group_rewards import group_rewards, pair_schedule, position_consistency
from serving.judges import Verdict
from tests.support.servers import start_server
from tests.test_serving_pairwise import pairwise_judge_dir  # noqa: F401  (a module fixture used below)
from tests.test_serving_scalar import assert_clean_shutdown

PROMPT = "Which city is the capital of Kenya?"


def test_all_pairs_compares_every_pair_once():
    assert pair_schedule(4, "all_pairs") == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert len(pair_schedule(16, "all_pairs")) == 120


def test_k_random_meets_k_siblings_at_least_and_costs_at_most_n_times_k():
    pairs = pair_schedule(16, "k_random", k=3, seed=7)
    assert pairs == pair_schedule(16, "k_random", k=3, seed=7)  # seeded
    assert all(i < j for i, j in pairs) and len(set(pairs)) == len(pairs)
    assert 16 * 3 // 2 <= len(pairs) <= 16 * 3
    for completion in range(16):
        assert sum(completion in pair for pair in pairs) >= 3
    for bad_k in (None, 0, 16):
        with pytest.raises(ValueError, match="k_random needs k"):
            pair_schedule(16, "k_random", k=bad_k)


def planted_verdicts(completions: list[str], pairs, prefers) -> list[Verdict]:
    return [Verdict(prefers(completions[i], completions[j]), "", {}) for i, j in pairs]


def test_a_judge_that_prefers_the_longer_answer_ranks_a_group_by_length():
    completions = ["a medium answer", "short", "the longest answer of them all", "a bit longer answer"]
    pairs = pair_schedule(len(completions), "all_pairs")
    longer = planted_verdicts(completions, pairs, lambda a, b: float(len(a) > len(b)))
    scores = [reward.score for reward in group_rewards(len(completions), pairs, longer)]
    assert sorted(range(4), key=scores.__getitem__) == sorted(range(4), key=lambda i: len(completions[i]))
    assert scores == [1 / 3, 0.0, 1.0, 2 / 3]


def test_a_failed_comparison_is_reported_and_left_out_never_scored():
    completions = ["x", "FAIL", "yy", "zzz"]
    pairs = pair_schedule(4, "all_pairs")

    def verdict(i, j):
        if "FAIL" in (completions[i], completions[j]):
            return Verdict.failed("unparsable answer")
        return Verdict(float(len(completions[i]) > len(completions[j])), "", {})

    rewards = group_rewards(4, pairs, [verdict(i, j) for i, j in pairs])
    assert rewards[1].score is None and (rewards[1].comparisons, rewards[1].failed) == (0, 3)
    assert "3 of 3 comparisons failed (no reward)" in rewards[1].error
    assert [(r.score, r.comparisons, r.failed) for r in (rewards[0], rewards[2], rewards[3])] == [
        (0.0, 2, 1),
        (0.5, 2, 1),
        (1.0, 2, 1),
    ]
    assert rewards[0].error == (
        "1 of 3 comparisons failed (the reward is the mean of the 2 that answered): "
        "against completion 1: unparsable answer"
    )


def test_position_consistency_counts_the_orders_that_agree():
    verdicts = [Verdict(0.5, "", {"orders_agree": agree}) for agree in (True, False, False, True)]
    assert position_consistency([*verdicts, Verdict.failed("x")]) == 0.5
    assert position_consistency([Verdict(0.5, "", {})]) is None  # a scalar judge has no orders


def test_each_completion_counts_its_comparisons_whose_orders_agreed():
    pairs = pair_schedule(3, "all_pairs")  # (0, 1), (0, 2), (1, 2)
    verdicts = [Verdict(0.5, "", {"orders_agree": agree}) for agree in (True, False, True)]
    assert [reward.orders_agreed for reward in group_rewards(3, pairs, verdicts)] == [1, 2, 1]
    unordered = group_rewards(3, pairs, [Verdict(0.5, "", {})] * 3)  # a scalar judge compares in one order
    assert [reward.orders_agreed for reward in unordered] == [None] * 3


@pytest.fixture(scope="module")
def pairwise_server(pairwise_judge_dir, tmp_path_factory):  # noqa: F811
    log_path = tmp_path_factory.mktemp("group_pairwise_server") / "server.log"
    running = start_server(
        ["--model", str(pairwise_judge_dir), "--max-new-tokens", "8", "--max-group-size", "6"], log_path=log_path
    )
    yield running
    assert_clean_shutdown(running)


def judge_group(url: str, completions: list[str], **fields) -> httpx.Response:
    body = {"prompt": PROMPT, "completions": completions, **fields}
    return httpx.post(f"{url}/judge_group", json=body, timeout=120)


@pytest.mark.e2e
def test_a_first_position_judge_gives_every_completion_the_same_reward(pairwise_server):
    answer = judge_group(pairwise_server.url, [f"Nairobi {i} <first>" for i in range(4)], request_id="g1").json()
    assert answer["request_id"] == "g1" and answer["comparisons_run"] == 6
    for reward in answer["rewards"]:  # each comparison in both orders: 0.8 for A, then 0.2 for the first response
        assert reward["score"] == pytest.approx(0.5) and (reward["comparisons"], reward["failed"]) == (3, 0)
        assert reward["orders_agreed"] == 0
    assert answer["metadata"]["position_consistency"] == 0.0  # the two orders always chose different responses


@pytest.mark.e2e
def test_good_answers_outrank_bad_ones_and_a_broken_comparison_is_reported(pairwise_server):
    completions = ["Nairobi <good>", "Lagos <bad>", "It is Nairobi <good>", "Cairo <bad>", "??? <broken>"]
    rewards = judge_group(pairwise_server.url, completions).json()["rewards"]
    # good vs bad: (0.9 + (1 - 0.3)) / 2 = 0.8; good vs good and bad vs bad: 0.5
    for good in (0, 2):
        assert rewards[good]["score"] == pytest.approx((0.5 + 0.8 + 0.8) / 3)
    for bad in (1, 3):
        assert rewards[bad]["score"] == pytest.approx((0.2 + 0.2 + 0.5) / 3)
    for answered in rewards[:4]:
        assert (answered["comparisons"], answered["failed"]) == (3, 1) and "against completion 4" in answered["error"]
    assert rewards[4]["score"] is None and rewards[4]["failed"] == 4 and "no reward" in rewards[4]["error"]


@pytest.mark.e2e
def test_the_route_refuses_what_it_cannot_judge(pairwise_server):
    too_many = judge_group(pairwise_server.url, ["a <first>"] * 7)
    assert too_many.status_code == 413 and "limit is 6" in too_many.text
    assert judge_group(pairwise_server.url, ["alone <first>"]).status_code == 422
    bad_k = judge_group(pairwise_server.url, ["a <first>", "b <first>"], schedule="k_random", k=2)
    assert bad_k.status_code == 422 and "k_random needs k between 1 and the group size - 1 (1)" in bad_k.text
    k_random = judge_group(pairwise_server.url, [f"{i} <first>" for i in range(6)], schedule="k_random", k=1).json()
    assert 3 <= k_random["comparisons_run"] <= 6 and all(r["comparisons"] >= 1 for r in k_random["rewards"])


@pytest.mark.e2e
def test_a_scalar_judges_group_rewards_are_its_mean_pairwise_win_probabilities(tiny_scalar_judge_dir, tmp_path):
    completions = ["Nairobi.", "The capital of Kenya is Nairobi.", "Lagos, I think.", "", "Nairobi, in Kenya."]
    with start_server(["--model", str(tiny_scalar_judge_dir)], log_path=tmp_path / "server.log") as server:
        rewards = judge_group(server.url, completions).json()["rewards"]
        singles = httpx.post(
            f"{server.url}/batch_judge",
            json={"requests": [{"prompt": PROMPT, "completion": c} for c in completions]},
            timeout=60,
        ).json()["responses"]
    raw = [single["metadata"]["raw_reward"] for single in singles]
    for i, reward in enumerate(rewards):
        expected = sum(1 / (1 + math.exp(raw[j] - raw[i])) for j in range(5) if j != i) / 4
        assert reward["score"] == pytest.approx(expected, abs=1e-4)
    assert sorted(range(5), key=lambda i: rewards[i]["score"]) == sorted(range(5), key=raw.__getitem__)


@pytest.mark.e2e
def test_the_client_clips_k_to_the_siblings_a_short_group_has(tiny_scalar_judge_dir, tmp_path):
    """group_k=2 and a group of 2: the server would refuse k=2 (422) and every completion fall back to the rules;
    the client sends k=1, each completion's one sibling."""
    from tests.reward_adapter_servers import make_system

    completions = ["Nairobi.", "The capital of Kenya is Nairobi."]
    settings = {"group_relative": True, "group_schedule": "k_random", "group_k": 2}
    with start_server(["--model", str(tiny_scalar_judge_dir)], log_path=tmp_path / "server.log") as server:
        direct = judge_group(server.url, completions).json()["rewards"]
        with make_system(server.url, **settings) as system:
            rewards = system.reward_batch([{"prompt": PROMPT, "completion": c} for c in completions])
    assert [r["source"] for r in rewards] == ["judge", "judge"], rewards
    assert [r["reward"] for r in rewards] == pytest.approx([r["score"] for r in direct], abs=1e-6)
    assert [r["comparisons"] for r in rewards] == [1, 1]


def test_a_judge_that_cannot_compare_refuses_groups(tmp_path):
    with start_server(["--judge", "rule"], log_path=tmp_path / "server.log") as server:
        answer = httpx.post(f"{server.url}/judge_group", json={"prompt": PROMPT, "completions": ["4", "5"]})
    assert answer.status_code == 400
    assert answer.json()["detail"] == "/judge_group needs a pairwise or scalar judge; this server hosts a rule judge"


# --- OpenRLHF: one-sample requests gathered into groups by prompt (--openrlhf-group-size) ---------------------

CHATML = "<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
QUESTIONS = ("What is the capital of Kenya?", "What is 2+2?")
ANSWERS = ("Nairobi.", "It is Nairobi, in Kenya.", "Lagos", "I do not know, sorry.")


def openrlhf_sample(question: str, answer: str) -> dict:
    prompt = CHATML.format(question=question)
    return {"query": [prompt + answer + "<|im_end|>"], "prompts": [prompt]}


def post_concurrently(url: str, bodies: list[dict]) -> list[httpx.Response]:
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: httpx.post(f"{url}/openrlhf/reward", json=body, timeout=120), bodies))


@pytest.fixture(scope="module")
def gathering_server(tiny_scalar_judge_dir, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("gathering_server") / "server.log"
    flags = ["--model", str(tiny_scalar_judge_dir), "--openrlhf-group-size", "4", "--openrlhf-group-window-s", "3"]
    running = start_server(flags, log_path=log_path)
    yield running
    assert_clean_shutdown(running)


@pytest.mark.e2e
def test_one_sample_requests_are_rewarded_as_their_prompts_groups(gathering_server):
    samples = [(question, answer) for answer in ANSWERS for question in QUESTIONS]  # the two groups interleaved
    answers = post_concurrently(gathering_server.url, [openrlhf_sample(q, a) for q, a in samples])
    assert all(answer.status_code == 200 for answer in answers), [answer.text for answer in answers]
    for question in QUESTIONS:
        group = judge_group(gathering_server.url, list(ANSWERS), prompt=[{"role": "user", "content": question}])
        expected = [reward["score"] for reward in group.json()["rewards"]]
        got = [answer.json() for (q, _), answer in zip(samples, answers, strict=True) if q == question]
        assert [g["rewards"][0] for g in got] == pytest.approx(expected, abs=1e-4)
        assert all(
            g["extra_logs"] == {"group_size": [4.0], "comparisons": [3.0], "failed_comparisons": [0.0]} for g in got
        )


@pytest.mark.e2e
def test_a_group_cut_short_by_the_window_is_scored_from_what_arrived_and_a_lone_sample_fails(gathering_server):
    short = post_concurrently(gathering_server.url, [openrlhf_sample("Name a prime.", a) for a in ("2", "3", "4")])
    assert [answer.json()["extra_logs"]["group_size"] for answer in short] == [[3.0]] * 3
    lone = httpx.post(f"{gathering_server.url}/openrlhf/reward", json=openrlhf_sample("Alone?", "Yes."), timeout=60)
    assert lone.status_code == 500 and "no sibling of this prompt arrived within 3.0s" in lone.text


def test_gathering_needs_a_judge_that_compares():
    from judge_models.config import JudgeConfig
    from serving.config import ServingConfig
    from serving.judges import load_judge
    from serving.server import build_local_app

    with pytest.raises(ValueError, match="--openrlhf-group-size needs a pairwise or scalar judge"):
        build_local_app(load_judge(JudgeConfig(judge="rule")), ServingConfig(openrlhf_group_size=4))
