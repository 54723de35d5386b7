"""The reward adapter's reliability guarantees against a purpose-built server (tests/reward_adapter_servers.py):
malformed answers, the cache, the batching and concurrency limits, retries, the circuit breaker and close()."""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from judge_core.protocol import http_retry
from judge_core.protocol.judge_api import JudgeItem
from judge_rewards import JudgeRewardConfig, JudgeUnavailableError, judge_client
from judge_rewards.judge_client import BatchingJudgeClient
from judge_rewards.reward_metrics import RewardMetrics
from tests.reward_adapter_servers import FaultyJudgeServer, item, make_system

HANG_BOUND_S = 10.0  # far beyond what any of these calls needs: only there to turn a hang into a failure


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + HANG_BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {HANG_BOUND_S}s: {what}"
        time.sleep(0.01)


@pytest.fixture
def faulty():
    server = FaultyJudgeServer()
    yield server
    server.close()


# ---- a malformed answer fails its batch at once, and only its batch ------------------------------------


def reward_within_bound(system, caller: concurrent.futures.Executor, n: int) -> dict:
    return caller.submit(system.reward, **item(n)).result(timeout=HANG_BOUND_S)


@pytest.mark.parametrize(
    "mode, cause",
    [
        ("list_id", "request_id"),
        ("huge_score", str(FaultyJudgeServer.HUGE_SCORE)[:30]),
        ("deep_json", "RecursionError"),
    ],
)
def test_a_malformed_answer_settles_its_request_at_once_and_does_not_poison_it(faulty, mode, cause):
    faulty.script = [mode]  # then healthy answers
    # timeout 30 s: a caller left waiting for its future would wait result_timeout (over a minute), past the bound
    with concurrent.futures.ThreadPoolExecutor(1) as caller, make_system(faulty.url, timeout=30.0) as system:
        failed = reward_within_bound(system, caller, 7)
        assert (failed["source"], failed["reward"]) == ("rule_fallback", 1.0)
        assert cause in failed["error"]
        assert system.get_metrics()["current_queue_size"] == 0
        again = reward_within_bound(system, caller, 7)  # the same request: not attached to a dead future
        assert (again["source"], again["reward"]) == ("judge", 0.007)
        assert faulty.requests_received == 2


@pytest.mark.parametrize("mode, cause", [("list_id", "request_id"), ("deep_json", "RecursionError")])
def test_a_malformed_answer_fails_every_item_of_its_batch_and_counts_as_a_failed_batch(faulty, mode, cause):
    faulty.script = [mode]
    with (
        concurrent.futures.ThreadPoolExecutor(1) as caller,
        make_system(faulty.url, timeout=30.0, max_batch_size=3, batch_timeout=1.0) as system,
    ):
        results = caller.submit(system.reward_batch, [item(n) for n in (1, 2, 3)]).result(timeout=HANG_BOUND_S)
        assert [r["source"] for r in results] == ["rule_fallback"] * 3
        assert all(cause in r["error"] for r in results)
        assert faulty.requests_received == 1
        metrics = system.get_metrics()
        assert (metrics["circuit_breaker"]["failures"], metrics["current_queue_size"]) == (1, 0)
        assert reward_within_bound(system, caller, 4)["source"] == "judge"
        assert system.get_metrics()["circuit_breaker"]["failures"] == 0


# ---- the cache -------------------------------------------------------------------------------------------


def test_without_the_cache_identical_calls_both_reach_the_judge(faulty):
    with make_system(faulty.url, use_cache=False) as system:
        assert [system.reward(**item(4))["source"] for _ in range(2)] == ["judge", "judge"]
        assert faulty.items_received == 2 and system.get_metrics()["cache_hits"] == 0


def test_a_full_cache_evicts_its_least_recently_used_entry(faulty):
    with make_system(faulty.url, cache_size=2) as system:
        sources = [system.reward(**item(n))["source"] for n in (1, 2, 1, 3)]  # 1 used again, then 3 evicts 2
        assert sources == ["judge", "judge", "cache", "judge"]
        assert system.reward(**item(1))["source"] == "cache"
        assert system.reward(**item(2))["source"] == "judge"
        assert faulty.items_received == 4


# ---- batching and concurrency ------------------------------------------------------------------------------


def test_max_concurrent_requests_caps_the_requests_in_flight(faulty):
    faulty.mode, faulty.delay = "slow", 0.5
    with (
        concurrent.futures.ThreadPoolExecutor(12) as callers,
        make_system(faulty.url, max_batch_size=1, max_concurrent_requests=3) as system,
    ):
        results = list(callers.map(lambda n: system.reward(**item(n)), range(1, 13)))
        assert [r["source"] for r in results] == ["judge"] * 12
    assert faulty.requests_received == 12
    assert faulty.most_at_once == 3


def test_a_lone_item_goes_out_after_batch_timeout_as_a_batch_of_one(faulty):
    batch_timeout = 0.3
    with make_system(faulty.url, max_batch_size=16, batch_timeout=batch_timeout) as system:
        asked = time.monotonic()
        result = system.reward(**item(5))
        assert (result["source"], result["reward"]) == ("judge", 0.005)  # not left waiting for 15 more items
    assert faulty.batch_sizes == [1]
    assert faulty.arrivals[0] - asked >= batch_timeout  # it did wait for company first


# ---- retries ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status, retried",
    [
        (500, True),
        (503, True),
        (429, True),
        (408, True),
        (400, False),
        (401, False),
        (404, False),
        (413, False),
        (422, False),
    ],
)
def test_only_transient_statuses_are_retried_and_the_others_are_permanent(faulty, status, retried):
    faulty.mode, faulty.status, faulty.retry_after = "status", status, "0"
    with make_system(faulty.url, max_retries=2, fallback_to_rule=False) as system:
        with pytest.raises(JudgeUnavailableError, match=f"judge answered HTTP {status}") as error:
            system.reward(**item(3))
        assert error.value.permanent is not retried
        assert system.get_metrics()["http_retries"] == (2 if retried else 0)
        assert faulty.requests_received == (3 if retried else 1)


def test_a_retry_comes_no_earlier_than_retry_after_says(faulty):
    faulty.script, faulty.status, faulty.retry_after = ["status"], 503, "1"  # then a healthy answer
    with make_system(faulty.url) as system:
        assert system.reward(**item(6))["source"] == "judge"
    first, retry = faulty.arrivals
    assert retry - first >= 1.0


def test_a_huge_retry_after_is_capped_at_the_longest_backoff(faulty, monkeypatch):
    monkeypatch.setattr(http_retry, "BACKOFF_CAP_S", 0.5)
    faulty.script, faulty.status, faulty.retry_after = ["status"], 429, "3600"
    with make_system(faulty.url) as system:
        # waiting the hour would end in 'Timeout waiting for results' (result_timeout) and the rule fallback
        assert system.reward(**item(6))["source"] == "judge"
    first, retry = faulty.arrivals
    assert retry - first >= 0.5


# ---- the circuit breaker ----------------------------------------------------------------------------------


def test_half_open_lets_one_probe_through_and_its_success_closes_the_circuit(faulty):
    faulty.script, faulty.status = ["status"], 503  # the first batch fails and opens the circuit
    faulty.mode = "hold"  # the next ones are held until released
    config = JudgeRewardConfig(
        judge_url=faulty.url, max_retries=0, max_batch_size=1, circuit_breaker_threshold=1, circuit_breaker_timeout=0.3
    )
    client = BatchingJudgeClient(config, RewardMetrics())
    try:
        with pytest.raises(JudgeUnavailableError, match="HTTP 503"):
            client.submit(JudgeItem.create(**item(1))).result(timeout=HANG_BOUND_S)
        wait_until(lambda: client.breaker.snapshot()["state"] == "half_open", "the circuit half-opens")
        # eight batches of one, all queued before the first goes out: each asks the breaker to be sent
        futures = client.submit_all([JudgeItem.create(**item(n)) for n in range(10, 18)])
        wait_until(
            lambda: sum(future.done() for future in futures) == 7 and faulty.requests_received >= 2,
            "the probe reaches the judge and all other batches fail fast",
        )
        assert faulty.requests_received == 2  # the failed batch, and the one probe
        probe = next(future for future in futures if not future.done())
        for future in futures:
            if future is not probe:
                assert str(future.exception()).startswith("Circuit breaker open")
        faulty.release.set()
        assert probe.result(timeout=HANG_BOUND_S).score in {n / 1000 for n in range(10, 18)}
        assert client.breaker.snapshot()["state"] == "closed"
        assert client.submit(JudgeItem.create(**item(20))).result(timeout=HANG_BOUND_S).score == 0.02
    finally:
        client.close()


def test_a_late_success_reaches_its_caller_and_leaves_the_open_circuit_to_its_probe(faulty):
    faulty.script, faulty.status = ["hold", "status"], 503
    with (
        concurrent.futures.ThreadPoolExecutor(1) as caller,
        make_system(faulty.url, max_retries=0, max_batch_size=1, circuit_breaker_threshold=1) as system,
    ):
        late = caller.submit(system.reward, **item(1))
        wait_until(lambda: faulty.requests_received == 1, "the first batch is held")
        assert "HTTP 503" in system.reward(**item(2))["error"]  # the second batch fails: the circuit opens
        faulty.release.set()
        assert (late.result(timeout=HANG_BOUND_S)["source"], late.result()["reward"]) == ("judge", 0.001)
        breaker = system.get_metrics()["circuit_breaker"]
        assert (breaker["state"], breaker["failures"], breaker["times_opened"]) == ("open", 1, 1)
        assert system.reward(**item(3))["error"].startswith("Circuit breaker open")
        assert faulty.requests_received == 2


# ---- close() -------------------------------------------------------------------------------------------------


def test_close_fails_queued_and_in_flight_requests_at_once(faulty, monkeypatch):
    monkeypatch.setattr(judge_client, "CLOSE_TIMEOUT_S", 60.0)  # a close() waiting for the worker outlasts the bound
    faulty.mode = "hold"
    with concurrent.futures.ThreadPoolExecutor(5) as callers:
        system = make_system(faulty.url, max_batch_size=1, max_concurrent_requests=1)
        calls = [callers.submit(system.reward, **item(n)) for n in range(1, 5)]
        wait_until(
            lambda: faulty.requests_received == 1 and system.get_metrics()["current_queue_size"] == 4,
            "one request held by the judge, three queued behind it",
        )
        callers.submit(system.close).result(timeout=HANG_BOUND_S)
        results = [call.result(timeout=HANG_BOUND_S) for call in calls]
        assert [(r["source"], r["error"]) for r in results] == [("rule_fallback", "judge client is closed")] * 4
        assert system.get_metrics()["current_queue_size"] == 0
        assert system.reward(**item(9))["error"] == "judge client is closed"
        assert faulty.requests_received == 1
