"""The reward adapter's group-relative mode (issue 29) against planted pairwise judges served over HTTP."""

from __future__ import annotations

import asyncio
import re

import pytest

from judge_rewards import ConfigError, JudgeRewardConfig, JudgeUnavailableError
from tests.group_judge_server import GroupJudgeServer
from tests.reward_adapter_servers import make_system

PROMPT = "Write something."


@pytest.fixture
def longer():
    server = GroupJudgeServer("longer", api_key="secret")
    yield server
    server.close()


def group(prompt: str, *completions: str, answer=None) -> list[dict]:
    return [{"prompt": prompt, "completion": c, "answer": answer} for c in completions]


def test_group_rewards_rank_by_the_planted_judge_and_carry_their_counts(longer):
    with make_system(longer.url, group_relative=True, api_key="secret") as system:
        rewards = system.reward_batch(group(PROMPT, "bb", "a", "cccc", "ddd"))
    assert [r["reward"] for r in rewards] == pytest.approx([1 / 3, 0.0, 1.0, 2 / 3])
    assert {r["source"] for r in rewards} == {"judge"}
    assert [(r["comparisons"], r["failed"]) for r in rewards] == [(3, 0)] * 4  # each of 3 siblings once
    assert [b["path"] for b in longer.bodies] == ["/judge_group"]
    assert longer.bodies[0]["auth"] == "Bearer secret" and longer.bodies[0]["schedule"] == "all_pairs"


def test_groups_go_out_on_a_single_connection(longer):
    """With max_concurrent_requests 1 the batch loop used to hold the only slot while it waited for items, and
    every group waited for it until its result timed out."""
    batch = group("P1", "a", "bbb") + group("P2", "cc", "d")
    with make_system(longer.url, group_relative=True, api_key="secret", max_concurrent_requests=1) as system:
        rewards = system.reward_batch(batch)
    assert [(r["reward"], r["source"]) for r in rewards] == [
        (0.0, "judge"),
        (1.0, "judge"),
        (1.0, "judge"),
        (0.0, "judge"),
    ]
    assert len(longer.bodies) == 2


def test_always_a_judge_gives_every_completion_the_same_reward():
    server = GroupJudgeServer("always_a")
    try:
        with make_system(server.url, group_relative=True) as system:
            rewards = system.reward_batch(group(PROMPT, "x", "yy", "zzz"))
    finally:
        server.close()
    assert [r["reward"] for r in rewards] == [0.5, 0.5, 0.5]


def test_a_batch_is_grouped_by_prompt_and_the_groups_go_out_separately(longer):
    batch = group("P1", "a", "bbb") + group("P2", "cc", "d") + group("P1", "ee")
    with make_system(longer.url, group_relative=True, api_key="secret") as system:
        rewards = system.reward_batch(batch)
    assert [r["reward"] for r in rewards] == pytest.approx([0.0, 1.0, 1.0, 0.0, 0.5])
    sent = sorted((b["prompt"], tuple(b["completions"])) for b in longer.bodies)
    assert sent == [("P1", ("a", "bbb", "ee")), ("P2", ("cc", "d"))]


def test_a_group_of_one_is_an_error_naming_the_prompt(longer):
    with make_system(longer.url, group_relative=True) as system, pytest.raises(ValueError, match="Lonely prompt.*1 c"):
        system.reward_batch(group("P1", "a", "b") + group("Lonely prompt", "c"))
    assert longer.bodies == []


def test_a_completion_whose_comparisons_all_failed_goes_to_the_tagged_fallback(longer):
    with make_system(longer.url, group_relative=True, api_key="secret") as system:
        rewards = system.reward_batch(group(PROMPT, "\\boxed{4} FAIL", "bb", "a", answer="4"))
    failed, survivor, loser = rewards
    assert failed["source"] == "rule_fallback" and failed["reward"] == 1.0  # the rules' score, not 0.5
    assert "no comparison of this completion answered" in failed["error"]
    assert (failed["comparisons"], failed["failed"]) == (0, 2)
    assert survivor["source"] == "judge" and survivor["reward"] == 1.0
    assert (survivor["comparisons"], survivor["failed"]) == (1, 1) and "planted FAIL" in survivor["error"]
    assert loser["reward"] == 0.0


def test_a_refused_group_falls_back_or_raises_with_the_reason():
    server = GroupJudgeServer(status=422)
    try:
        with make_system(server.url, group_relative=True) as system:
            rewards = system.reward_batch(group(PROMPT, "\\boxed{4}", "5", answer="4"))
            assert [r["source"] for r in rewards] == ["rule_fallback"] * 2
            assert [r["reward"] for r in rewards] == [1.0, 0.0] and "HTTP 422" in rewards[0]["error"]
        with (
            make_system(server.url, group_relative=True, fallback_to_rule=False) as system,
            pytest.raises(JudgeUnavailableError, match="HTTP 422"),
        ):
            system.reward_batch(group(PROMPT, "a", "b"))
    finally:
        server.close()


def test_the_cache_keys_on_the_whole_group(longer):
    with make_system(longer.url, group_relative=True, api_key="secret") as system:
        first = system.reward_batch(group(PROMPT, "a", "bb"))
        again = system.reward_batch(group(PROMPT, "a", "bb"))
        other = system.reward_batch(group(PROMPT, "a", "c"))  # same completion "a", other sibling
    assert [r["source"] for r in again] == ["cache", "cache"] and [r["reward"] for r in again] == [0.0, 1.0]
    assert first[0]["reward"] == 0.0 and other[0]["reward"] == 0.5
    assert len(longer.bodies) == 2


def test_per_sample_calls_are_gathered_into_groups_by_prompt(longer):
    async def rollouts(system):
        calls = [system.areward(p, c) for p, c in [("P1", "a"), ("P2", "xx"), ("P1", "bbb"), ("P2", "y")]]
        return await asyncio.gather(*calls)

    with make_system(longer.url, group_relative=True, api_key="secret", group_size=2, group_window=30) as system:
        rewards = asyncio.run(asyncio.wait_for(rollouts(system), 20))
    assert [r["reward"] for r in rewards] == [0.0, 1.0, 1.0, 0.0]
    assert len(longer.bodies) == 2  # full groups go out without waiting for the window


def test_a_text_prompt_and_the_same_prompt_as_one_user_turn_are_one_group(longer):
    """The client keys a prompt as the server does (judge_core.protocol.judge_api.prompt_key): in a batch and
    when gathering per-sample calls alike."""

    def user_turn(text: str) -> list[dict]:
        return [{"role": "user", "content": text}]

    async def rollouts(system):
        return await asyncio.gather(system.areward("P2", "cc"), system.areward(user_turn("P2"), "d"))

    batch = [{"prompt": "P1", "completion": "a"}, {"prompt": user_turn("P1"), "completion": "bbb"}]
    with make_system(longer.url, group_relative=True, api_key="secret", group_size=2, group_window=30) as system:
        batched = system.reward_batch(batch)
        gathered = asyncio.run(asyncio.wait_for(rollouts(system), 20))
    assert [r["reward"] for r in batched] == [0.0, 1.0]
    assert [r["reward"] for r in gathered] == [1.0, 0.0]
    assert len(longer.bodies) == 2


def test_a_partial_group_goes_out_after_the_window_and_a_lone_sample_falls_back(longer):
    async def rollouts(system):
        return await asyncio.gather(
            system.areward("P1", "a"), system.areward("P1", "bb"), system.areward("P2", "\\boxed{4}", "4")
        )

    with make_system(longer.url, group_relative=True, api_key="secret", group_size=4, group_window=0.2) as system:
        pair_a, pair_b, lone = asyncio.run(asyncio.wait_for(rollouts(system), 20))
    assert (pair_a["reward"], pair_b["reward"]) == (0.0, 1.0)
    assert lone["source"] == "rule_fallback" and "only 1 completion of the prompt 'P2'" in lone["error"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"group_schedule": "tournament"}, "group_schedule: must be one of"),
        ({"group_schedule": "k_random"}, "group_k: is needed with group_schedule k_random"),
        ({"group_k": 2}, "group_k: is needed"),
        ({"group_size": 1}, "group_size: must be >= 2"),
    ],
)
def test_bad_group_settings_name_the_key(config, message):
    with pytest.raises(ConfigError, match=message):
        JudgeRewardConfig.from_mapping({"judge_url": "http://h:1", **config})


def test_group_mode_and_schedule_come_from_their_env_variables(longer):
    environ = {"JUDGE_MODEL_URL": longer.url, "JUDGE_GROUP_RELATIVE": "1", "JUDGE_GROUP_SCHEDULE": "k_random"}
    config = JudgeRewardConfig.from_mapping({}, {**environ, "JUDGE_GROUP_K": "1", "JUDGE_GROUP_SIZE": "8"})
    assert (config.group_relative, config.group_schedule, config.group_k, config.group_size) == (True, "k_random", 1, 8)
    with make_system(longer.url, group_relative=True, api_key="secret", group_schedule="k_random", group_k=1) as system:
        system.reward_batch(group(PROMPT, "a", "bb", "ccc"))
    assert (longer.bodies[0]["schedule"], longer.bodies[0]["k"]) == ("k_random", 1)


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda body: {**body, "rewards": body["rewards"][:1]}, "expected 2 rewards"),
        (lambda body: {**body, "request_id": "someone-else"}, "with request_id 'someone-else'"),
        (lambda body: {**body, "rewards": [{"score": 0.5, "comparisons": 0, "failed": 0}] * 2}, "from 0 comparisons"),
        (lambda body: {**body, "rewards": [{"score": 2, "comparisons": 1, "failed": 0}] * 2}, r"in \[0, 1\]"),
    ],
    ids=["short", "request_id", "score_from_nothing", "out_of_range"],
)
def test_an_answer_that_breaks_the_contract_is_a_failure_not_a_score(mangle, reason):
    server = GroupJudgeServer(mangle=mangle)
    try:
        with make_system(server.url, group_relative=True) as system:
            rewards = system.reward_batch(group(PROMPT, "\\boxed{4}", "5", answer="4"))
    finally:
        server.close()
    assert [r["source"] for r in rewards] == ["rule_fallback"] * 2
    assert all(re.search(reason, r["error"]) for r in rewards), rewards[0]["error"]


def test_failed_groups_open_the_shared_circuit_breaker():
    server = GroupJudgeServer(status=503)
    try:
        with make_system(server.url, group_relative=True, max_retries=0, circuit_breaker_threshold=2) as system:
            for _ in range(2):
                system.reward_batch(group(PROMPT, "\\boxed{4}", "5", answer="4"))
            rewards = system.reward_batch(group(PROMPT, "\\boxed{4}", "6", answer="4"))
            assert system.get_metrics()["circuit_breaker"]["state"] == "open"
    finally:
        server.close()
    assert "Circuit breaker open" in rewards[0]["error"] and len(server.bodies) == 2
