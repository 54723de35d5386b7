"""The reward adapter without the real judge server: configuration, circuit breaker, and the faults a
purpose-built server produces on demand (garbage, HTTP errors, slowness, reordering, holding)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import pickle
import re
import subprocess
import sys
import threading
import time

import pytest

from judge_rewards import (
    BaseJudgeReward,
    ConfigError,
    JudgeRewardConfig,
    JudgeUnavailableError,
    create_judge_reward,
)
from judge_rewards.circuit_breaker import CircuitBreaker
from judge_rewards.judge_reward_adapter import MultiCritiqueJudge
from tests.reward_adapter_servers import FaultyJudgeServer, item, make_system
from tests.support.servers import free_port

# ---- configuration -----------------------------------------------------------------------------------

SEED_YAML_CONFIG = {  # the seed's `reward.config`, as a YAML loader returns it
    "judge_url": "${JUDGE_MODEL_URL}",
    "api_key": "${JUDGE_MODEL_API_KEY}",
    "use_cache": True,
    "cache_size": 5000,
    "max_batch_size": 16,
    "batch_timeout": 0.05,
    "max_concurrent_requests": 32,
    "timeout": 30.0,
    "fallback_to_rule": True,
    "max_retries": 3,
}


def test_seed_config_resolves_env_references_and_leaves_unset_optional_keys_default():
    config = JudgeRewardConfig.from_mapping(SEED_YAML_CONFIG, environ={"JUDGE_MODEL_URL": "http://judge:8888"})
    assert config.judge_url == "http://judge:8888"
    assert config.api_key is None  # ${JUDGE_MODEL_API_KEY} unset: optional, as the seed says
    assert (config.max_batch_size, config.batch_timeout, config.max_retries) == (16, 0.05, 3)


def test_env_variables_fill_absent_keys_and_are_cast():
    environ = {
        "JUDGE_MODEL_URL": "http://judge:8888",
        "JUDGE_MAX_BATCH_SIZE": "8",
        "JUDGE_MAX_CONCURRENT": "4",
        "JUDGE_MODEL_API_KEY": "secret",
    }
    config = JudgeRewardConfig.from_mapping({}, environ=environ)
    assert (config.max_batch_size, config.max_concurrent_requests, config.api_key) == (8, 4, "secret")
    assert isinstance(config.max_batch_size, int)


def test_explicit_config_wins_over_env_variables():
    config = JudgeRewardConfig.from_mapping(
        {"judge_url": "http://a:1", "max_batch_size": 32},
        environ={"JUDGE_MODEL_URL": "http://b:2", "JUDGE_MAX_BATCH_SIZE": "8"},
    )
    assert (config.judge_url, config.max_batch_size) == ("http://a:1", 32)


def test_env_reference_default_and_string_values_are_cast():
    config = JudgeRewardConfig.from_mapping(
        {
            "judge_url": "${NOPE:-http://fallback:9}",
            "timeout": "2.5",
            "use_cache": "false",
            "max_retries": "${RETRIES}",
        },
        environ={"RETRIES": "0"},
    )
    assert (config.judge_url, config.timeout, config.use_cache, config.max_retries) == (
        "http://fallback:9",
        2.5,
        False,
        0,
    )


@pytest.mark.parametrize(
    "config, environ, message",
    [
        (
            {},
            {"JUDGE_MAX_BATCH_SIZE": "sixteen", "JUDGE_MODEL_URL": "http://j:1"},
            "max_batch_size: expected an integer (from env JUDGE_MAX_BATCH_SIZE",
        ),
        ({"judge_url": "http://j:1", "max_concurrent_requests": 0}, {}, "max_concurrent_requests: must be >= 1"),
        ({"judge_url": "http://j:1", "use_cache": "maybe"}, {}, "use_cache: expected a boolean"),
        ({"judge_url": "http://j:1", "max_batch_size": 8.5}, {}, "max_batch_size: expected an integer"),
        ({"judge_url": "http://j:1", "timeout": 0}, {}, "timeout: must be > 0"),
        ({}, {}, "judge_url: must be an http(s) URL, got None; set it in the config or in JUDGE_MODEL_URL"),
        ({"judge_url": "judge:8888"}, {}, "judge_url: must be an http(s) URL"),
        ({"judge_url": "http://j:1", "max_batchsize": 8}, {}, "unknown reward config keys ['max_batchsize']"),
    ],
)
def test_bad_settings_raise_an_error_naming_the_key(config, environ, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        JudgeRewardConfig.from_mapping(config, environ=environ)


def test_every_setting_has_a_line_of_help():
    lines = JudgeRewardConfig.help()
    assert set(SEED_YAML_CONFIG) | {"circuit_breaker_threshold", "circuit_breaker_timeout"} <= set(lines)
    assert "[env JUDGE_MAX_CONCURRENT]" in lines["max_concurrent_requests"]
    assert all(line.strip() for line in lines.values())


def test_importing_templates_does_not_import_the_http_client():
    code = (
        "import sys, judge_core.protocol.templates, judge_core.rules; "
        "assert 'httpx' not in sys.modules, 'httpx imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- circuit breaker ---------------------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_circuit_breaker_opens_probes_once_and_closes():
    clock = FakeClock()
    breaker = CircuitBreaker(threshold=2, reset_timeout=10, clock=clock)
    first, second = breaker.try_acquire(), breaker.try_acquire()
    assert breaker.record_failure(first) is False
    assert breaker.record_failure(second) is True
    assert breaker.snapshot()["state"] == "open" and breaker.rejects_now() and breaker.try_acquire() is None
    clock.now = 10
    assert not breaker.rejects_now()
    probe = breaker.try_acquire()
    assert probe.probe
    assert breaker.try_acquire() is None and breaker.rejects_now()  # one probe at a time
    assert breaker.record_success(probe) is True
    assert breaker.snapshot() | {"reset_timeout_s": 0} == {
        "state": "closed",
        "failures": 0,
        "threshold": 2,
        "reset_timeout_s": 0,
        "times_opened": 1,
    }


def test_failed_probe_reopens_the_circuit():
    clock = FakeClock()
    breaker = CircuitBreaker(threshold=1, reset_timeout=5, clock=clock)
    breaker.record_failure(breaker.try_acquire())
    clock.now = 5
    probe = breaker.try_acquire()
    assert breaker.record_failure(probe) is True
    assert breaker.snapshot()["state"] == "open" and breaker.snapshot()["times_opened"] == 2
    assert breaker.try_acquire() is None


def test_outcomes_of_batches_sent_before_the_circuit_opened_leave_it_to_the_probe():
    clock = FakeClock()
    breaker = CircuitBreaker(threshold=1, reset_timeout=5, clock=clock)
    late_success, late_failure, failing = breaker.try_acquire(), breaker.try_acquire(), breaker.try_acquire()
    assert breaker.record_failure(failing) is True
    assert breaker.record_success(late_success) is False
    assert breaker.snapshot()["state"] == "open" and breaker.rejects_now()  # still resting
    clock.now = 5
    probe = breaker.try_acquire()
    assert breaker.record_failure(late_failure) is False
    assert breaker.rejects_now() and breaker.try_acquire() is None  # the probe is still the one in flight
    assert breaker.record_success(probe) is True
    assert breaker.snapshot()["state"] == "closed" and breaker.snapshot()["times_opened"] == 1


# ---- faults from a purpose-built server ----------------------------------------------------------------


@pytest.fixture
def faulty():
    server = FaultyJudgeServer()
    yield server
    server.close()


def test_results_are_matched_by_request_id_not_by_order(faulty):
    with make_system(faulty.url, max_batch_size=50, batch_timeout=0.5) as system:
        results = system.reward_batch([item(n) for n in range(1, 41)])
        assert [r["reward"] for r in results] == [n / 1000 for n in range(1, 41)]  # the server answers in reverse
        assert all(
            r["source"] == "judge" and r["explanation"] == f"item {n}"
            for n, r in zip(range(1, 41), results, strict=True)
        )
        assert system.get_metrics()["batched_fraction"] > 0.5


def test_reward_batch_queues_its_items_together(faulty):
    # With no wait for stragglers (batch_timeout 0) only items queued at once share a request: queued one at a
    # time from threads, 40 items went out in 2 to 10 requests.
    with make_system(faulty.url, max_batch_size=64, batch_timeout=0.0) as system:
        results = system.reward_batch([item(n) for n in range(1, 41)])
        assert [r["reward"] for r in results] == [n / 1000 for n in range(1, 41)]
        assert faulty.batch_sizes == [40]
    with make_system(faulty.url, max_batch_size=16, batch_timeout=0.0) as system:
        system.reward_batch([item(n) for n in range(41, 81)])
        assert sorted(faulty.batch_sizes[1:]) == [8, 16, 16]  # sent at once: they may arrive in any order


def test_reward_batch_mixes_cached_answered_and_failed_items_in_order(faulty):
    faulty.script = ["ok", "garbage"]
    with make_system(faulty.url, max_batch_size=2, batch_timeout=0.0, max_retries=0) as system:
        assert system.reward(**item(1))["source"] == "judge"
        results = system.reward_batch([item(2), item(1), item(3, completion="\\boxed{0}")])
        assert [r["source"] for r in results] == ["rule_fallback", "cache", "rule_fallback"]
        assert [r["reward"] for r in results] == [1.0, 0.001, 0.0]
        assert faulty.batch_sizes == [1, 2]
    faulty.mode = "garbage"
    with make_system(faulty.url, fallback_to_rule=False, max_retries=0) as system:
        with pytest.raises(JudgeUnavailableError, match="not JSON"):
            system.reward_batch([item(5)])
        failed = system.reward_batch([item(6), item(7)], return_exceptions=True)
        assert [type(outcome) for outcome in failed] == [JudgeUnavailableError] * 2


def test_garbage_body_falls_back_to_rules_with_the_reason(faulty, caplog):
    faulty.mode = "garbage"
    with make_system(faulty.url) as system, caplog.at_level(logging.WARNING, logger="JudgeReward"):
        result = system.reward(**item(7))
        assert (result["reward"], result["source"]) == (1.0, "rule_fallback")
        assert "not JSON" in result["error"] and "upstream proxy error" in result["error"]
        assert system.get_metrics()["http_retries"] == 0  # a malformed body is not retried
    assert any("rule_fallback" in r.message for r in caplog.records)


def test_body_without_responses_list_is_a_failure_not_a_zero(faulty):
    faulty.mode = "shapeless"
    with make_system(faulty.url) as system:
        result = system.reward(**item(7, completion="\\boxed{8}"))
        assert (result["reward"], result["source"]) == (0.0, "rule_fallback")
        assert "malformed /batch_judge body" in result["error"]


@pytest.mark.parametrize(
    "mode, reason",
    [
        ("item_error", "judge output unparsable"),
        ("drop_first", "no result for request_id"),
        ("bad_score", "invalid score 1.7"),
    ],
)
def test_item_level_failures_fall_back_for_that_item_only(faulty, mode, reason):
    faulty.mode = mode
    with make_system(faulty.url, max_batch_size=3, batch_timeout=1.0) as system:
        numbers = [11, 12, 13]
        results = system.reward_batch([item(n) for n in numbers])
        assert faulty.requests_received == 1
        assert sorted(r["source"] for r in results) == ["judge", "judge", "rule_fallback"]
        for n, result in zip(numbers, results, strict=True):
            if result["source"] == "judge":
                assert result["reward"] == n / 1000
            else:
                assert reason in result["error"] and result["reward"] == 1.0
        assert system.get_metrics()["circuit_breaker"]["failures"] == 0  # the server answered: not a batch failure


def test_slow_server_times_out_and_falls_back(faulty):
    faulty.mode, faulty.delay = "slow", 2.0
    with make_system(faulty.url, timeout=0.3, max_retries=1) as system:
        result = system.reward(**item(5))
        assert result["source"] == "rule_fallback" and "timed out after 0.3s" in result["error"]
        assert system.get_metrics()["http_retries"] == 1


def test_callers_stop_waiting_when_the_queue_is_slower_than_the_timeout(faulty):
    faulty.mode, faulty.delay = "slow", 0.8  # each batch answers in time, but one at a time
    with (
        make_system(faulty.url, timeout=1.0, max_retries=0, max_batch_size=1, max_concurrent_requests=1) as system,
        concurrent.futures.ThreadPoolExecutor(6) as callers,
    ):
        results = list(callers.map(lambda n: system.reward(**item(n)), range(1, 7)))
        assert all(r["source"] in ("judge", "rule_fallback") for r in results)
        assert [r["reward"] for r in results if r["source"] == "rule_fallback"] == [1.0] * sum(
            r["source"] == "rule_fallback" for r in results
        )
        timed_out = [r for r in results if r["error"] and r["error"].startswith("Timeout waiting for results")]
        assert timed_out, results


def test_identical_requests_in_flight_share_one_judgement(faulty):
    faulty.mode = "hold"
    with make_system(faulty.url) as system, concurrent.futures.ThreadPoolExecutor(5) as pool:
        first = pool.submit(system.reward, **item(9))
        assert faulty.received.wait(10)
        others = [pool.submit(system.reward, **item(9)) for _ in range(4)]
        for _ in range(1000):
            if system.get_metrics()["deduplicated"] == 4:
                break
            time.sleep(0.01)
        assert system.get_metrics()["deduplicated"] == 4
        faulty.release.set()
        results = [f.result(timeout=10) for f in [first, *others]]
        assert {(r["reward"], r["source"], r["request_id"]) for r in results} == {
            (0.009, "judge", results[0]["request_id"])
        }
        assert faulty.items_received == 1


def test_full_queue_rejects_with_request_queue_full(faulty):
    faulty.mode = "hold"
    with make_system(faulty.url, max_queue_size=1) as system, concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(system.reward, **item(1))
        assert faulty.received.wait(10)
        rejected = system.reward(**item(2))
        assert rejected["source"] == "rule_fallback" and rejected["error"].startswith("Request queue full")
        faulty.release.set()
        assert held.result(timeout=10)["source"] == "judge"
        assert system.get_metrics()["rejected_queue_full"] == 1


def test_fallback_off_raises_a_clear_error():
    with make_system(f"http://127.0.0.1:{free_port()}", fallback_to_rule=False, max_retries=0) as system:
        with pytest.raises(JudgeUnavailableError, match="cannot reach the judge"):
            system.reward(**item(1))
        with pytest.raises(JudgeUnavailableError, match="cannot reach the judge"):
            system.reward_batch([item(1), item(2)])
        errors = system.reward_batch([item(1), item(2)], return_exceptions=True)
        assert all(isinstance(e, JudgeUnavailableError) for e in errors)


def test_no_reference_answer_and_no_judge_is_an_error_not_a_zero():
    with (
        make_system(f"http://127.0.0.1:{free_port()}", max_retries=0) as system,
        pytest.raises(JudgeUnavailableError, match="the rule fallback cannot score it either: no reference answer"),
    ):
        system.reward("What is 2+2?", "4", answer=None)


def test_circuit_opens_after_consecutive_failures_and_fails_fast(faulty):
    faulty.mode, faulty.status = "status", 503
    with make_system(faulty.url, max_retries=0, circuit_breaker_threshold=2) as system:
        results = [system.reward(**item(n)) for n in range(1, 6)]
        assert all(r["source"] == "rule_fallback" for r in results)
        assert sum("Circuit breaker open" in r["error"] for r in results) == 3
        assert faulty.requests_received == 2  # after the circuit opened nothing reached the server
        assert system.get_metrics()["circuit_breaker"]["state"] == "open"


def test_cache_hits_are_counted_and_tagged(faulty):
    with make_system(faulty.url) as system:
        first = system.reward(**item(4))
        again = system.reward(**item(4))
        assert (first["source"], again["source"], again["reward"]) == ("judge", "cache", first["reward"])
        metrics = system.get_metrics()
        assert (metrics["cache_hits"], metrics["total_requests"], metrics["cache_hit_rate"]) == (1, 2, 0.5)
        assert faulty.items_received == 1


def test_multi_critique_judge_combines_judges_and_skips_a_dead_one(faulty):
    dead = f"http://127.0.0.1:{free_port()}"
    config = {"max_retries": 0, "batch_timeout": 0.01}
    mean = create_judge_reward({"judge_urls": [faulty.url, faulty.url, dead], "aggregate": "mean", **config})
    vote = MultiCritiqueJudge([faulty.url, dead], aggregate="vote", config=config)
    try:
        combined = mean.reward(**item(600))
        assert (combined["reward"], combined["source"]) == (0.6, "judge")
        assert dead in combined["error"] and combined["judges"][2] is None
        assert vote.reward(**item(600))["reward"] == 1.0  # 0.6 >= 0.5: a pass
        assert set(mean.get_metrics()) == {faulty.url, dead}
    finally:
        mean.close()
        vote.close()


def test_multi_critique_judge_falls_back_when_no_judge_answers():
    judge = MultiCritiqueJudge([f"http://127.0.0.1:{free_port()}"], config={"max_retries": 0})
    try:
        result = judge.reward(**item(2))
        assert (result["reward"], result["source"]) == (1.0, "rule_fallback") and "no judge answered" in result["error"]
    finally:
        judge.close()


def test_a_pickled_system_is_rebuilt_from_its_config(faulty):
    with make_system(faulty.url) as system:
        system.reward(**item(1))
        copy = pickle.loads(pickle.dumps(system))
        with copy:
            assert copy.config == system.config
            assert copy.reward(**item(2))["source"] == "judge"
            assert copy.get_metrics()["total_requests"] == 1


class LenientJudge(BaseJudgeReward):
    def _request_judge(self, request):
        if request.answer == "13":
            raise JudgeUnavailableError("this judge refuses 13")
        result = super()._request_judge(request)
        return dataclasses.replace(result, score=max(result.score, 0.1))


def test_subclass_hook_changes_judgements_and_keeps_cache_and_fallback(faulty):
    with LenientJudge({"judge_url": faulty.url}) as judge:
        assert judge.reward(**item(2))["reward"] == 0.1
        assert judge.reward(**item(2)) | {"request_id": None} == {
            "reward": 0.1,
            "source": "cache",
            "explanation": "item 2",
            "request_id": None,
            "error": None,
            "detailed_scores": None,
        }
        refused = judge.reward(**item(13))
        assert (refused["source"], refused["error"], refused["reward"]) == (
            "rule_fallback",
            "this judge refuses 13",
            1.0,
        )
        batch = judge.reward_batch([item(3), item(13)])  # reward_batch goes through the override too
        assert [(r["source"], r["reward"]) for r in batch] == [("judge", 0.1), ("rule_fallback", 1.0)]


def test_areward_awaits_many_items_in_batches_without_a_thread_each(faulty):
    faulty.mode, faulty.delay = "slow", 0.3

    async def all_at_once(system):
        results = await asyncio.gather(*(system.areward(**item(n)) for n in range(1, 33)))
        return results, [thread.name for thread in threading.enumerate() if thread not in before]

    before = set(threading.enumerate())  # earlier tests' threads may still be ending
    with make_system(faulty.url, max_batch_size=8, max_concurrent_requests=4) as system:
        results, started = asyncio.run(all_at_once(system))
        # no thread waited for an item: neither asyncio's executor nor reward_batch's pool started
        assert not [name for name in started if name.startswith(("asyncio_", "JudgeReward-batch"))], started
        assert [r["reward"] for r in results] == [n / 1000 for n in range(1, 33)]
        assert {r["source"] for r in results} == {"judge"} and faulty.requests_received < 8
        assert asyncio.run(system.areward(**item(3)))["source"] == "cache"


def test_areward_falls_back_and_times_out_like_reward(faulty):
    faulty.mode = "garbage"
    with make_system(faulty.url) as system:
        result = asyncio.run(system.areward(**item(7)))
        assert (result["reward"], result["source"]) == (1.0, "rule_fallback") and "not JSON" in result["error"]
    faulty.mode, faulty.delay = "slow", 0.8
    with make_system(faulty.url, timeout=1.0, max_retries=0, max_batch_size=1, max_concurrent_requests=1) as system:

        async def queued_behind_each_other():
            return await asyncio.gather(*(system.areward(**item(n)) for n in range(1, 7)))

        results = asyncio.run(queued_behind_each_other())
        assert any(r["error"] and r["error"].startswith("Timeout waiting for results") for r in results)
        assert all(r["reward"] == 1.0 for r in results if r["source"] == "rule_fallback")


def test_areward_keeps_a_subclass_hook(faulty):
    with LenientJudge({"judge_url": faulty.url}) as judge:
        assert asyncio.run(judge.areward(**item(2)))["reward"] == 0.1
        assert asyncio.run(judge.areward(**item(13)))["error"] == "this judge refuses 13"
