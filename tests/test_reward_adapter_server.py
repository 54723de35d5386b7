"""The reward adapter against the project's real judge server (`python -m serving --judge rule`) on
127.0.0.1: concurrency and batching, caching, item errors, auth, and the server dying and coming back."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from judge_rewards import JudgeRewardSystem, JudgeUnavailableError
from tests.reward_adapter_servers import start_rule_server

pytestmark = pytest.mark.e2e

RECOVERY_ATTEMPTS = 80
RECOVERY_PAUSE_S = 0.25


@pytest.fixture(scope="module")
def judge_server(tmp_path_factory):
    server = start_rule_server(tmp_path_factory.mktemp("judge") / "server.log")
    yield server
    server.stop()


def make_system(url: str, **overrides) -> JudgeRewardSystem:
    return JudgeRewardSystem(
        {
            "judge_url": url,
            "max_retries": 1,
            "timeout": 10.0,
            "circuit_breaker_threshold": 2,
            "circuit_breaker_timeout": 3.0,
            **overrides,
        }
    )


def numbered_item(n: int) -> tuple[dict, float]:
    """A NUMBER item whose reference is n, and the score the rule judge gives it (every third is wrong)."""
    correct = n % 3 != 0
    completion = f"Step by step... so the answer is \\boxed{{{n if correct else n + 1}}}"
    return {"prompt": f"What is {n} + 0?", "completion": completion, "answer": str(n), "answer_type": "NUMBER"}, float(
        correct
    )


def test_the_seed_example_scores_through_the_judge(judge_server, monkeypatch):
    monkeypatch.setenv("JUDGE_MODEL_URL", judge_server.url)
    with JudgeRewardSystem({"judge_url": "${JUDGE_MODEL_URL}", "api_key": "${JUDGE_MODEL_API_KEY}"}) as system:
        result = system.reward("What is 2+2?", "The answer is **boxed{4}**", "4", "NUMBER")
    assert (result["reward"], result["source"], result["error"]) == (1.0, "judge", None)
    assert result["explanation"] == "NUMBER: 4 (boxed) matches reference 4" and result["request_id"]


def test_many_threads_are_batched_matched_and_cached(judge_server):
    threads, per_thread = 8, 20
    numbers = range(1, threads * per_thread + 1)

    def run_all(system) -> list[tuple[int, dict]]:
        def one_thread(t: int):
            return [(n, system.reward(**numbered_item(n)[0])) for n in numbers if n % threads == t]

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            return [pair for chunk in pool.map(one_thread, range(threads)) for pair in chunk]

    with make_system(judge_server.url, batch_timeout=0.2, max_batch_size=16) as system:
        first = run_all(system)
        for n, result in first:
            assert result["source"] == "judge"
            assert result["reward"] == numbered_item(n)[1]
            assert result["explanation"].endswith(f"reference {n}")  # each caller got its own judgement
        metrics = system.get_metrics()
        assert metrics["items_sent"] == len(numbers) and metrics["judge_successes"] == len(numbers)
        assert metrics["batched_fraction"] >= 0.8, metrics
        assert metrics["batches_sent"] <= len(numbers) / 2
        assert metrics["error_rate"] == 0.0 and metrics["latency"]["count"] == len(numbers)

        again = run_all(system)
        assert all(result["source"] == "cache" for _, result in again)
        metrics = system.get_metrics()
        assert (metrics["cache_hits"], metrics["cache_hit_rate"], metrics["items_sent"]) == (
            len(numbers),
            0.5,
            len(numbers),
        )
        assert metrics["current_queue_size"] == 0 and metrics["circuit_breaker"]["state"] == "closed"


def test_batch_form_scores_many_items_at_once(judge_server):
    items = [numbered_item(n) for n in range(500, 564)]
    with make_system(judge_server.url, max_batch_size=16, max_concurrent_requests=4) as system:
        results = system.reward_batch([it for it, _ in items])
        assert [r["reward"] for r in results] == [expected for _, expected in items]
        assert system.get_metrics()["mean_batch_size"] > 4


def test_an_item_the_judge_cannot_score_is_an_error_not_a_zero(judge_server):
    with make_system(judge_server.url) as system:
        both = "rule judge cannot score this request.*the rule fallback cannot score it either: no reference answer"
        with pytest.raises(JudgeUnavailableError, match=both):
            system.reward("What is 2+2?", "4", answer=None)
        assert system.get_metrics()["circuit_breaker"]["failures"] == 0


def test_api_key_is_sent_and_a_wrong_one_is_not_retried(tmp_path):
    server = start_rule_server(tmp_path / "server.log", "--api-key", "s3cret")
    try:
        with make_system(server.url, api_key="s3cret") as system:
            assert system.reward("What is 2+2?", "\\boxed{4}", "4")["source"] == "judge"
        with make_system(server.url, api_key="wrong") as system:
            result = system.reward("What is 2+2?", "\\boxed{4}", "4")
            assert result["source"] == "rule_fallback" and "HTTP 401" in result["error"]
            assert system.get_metrics()["http_retries"] == 0
    finally:
        server.stop()


def test_server_killed_mid_run_then_restarted(tmp_path):
    server = start_rule_server(tmp_path / "server.log")
    results: list[tuple[int, dict]] = []
    results_lock = threading.Lock()
    try:
        with make_system(server.url, batch_timeout=0.02) as system:

            def caller(offset: int):
                for n in range(offset, offset + 25):
                    result = system.reward(**numbered_item(n)[0])
                    with results_lock:
                        results.append((n, result))

            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                callers = [pool.submit(caller, offset) for offset in (1000, 2000, 3000, 4000)]
                while len(results) < 12 and not all(c.done() for c in callers):
                    time.sleep(0.01)
                server.kill()
                for c in callers:
                    c.result(timeout=120)

            assert len(results) == 100  # every call was answered
            sources = {result["source"] for _, result in results}
            assert sources == {"judge", "rule_fallback"}
            for n, result in results:
                assert result["reward"] == numbered_item(n)[1]  # the rules agree with the rule judge
            fallback_errors = [r["error"] for _, r in results if r["source"] == "rule_fallback"]
            assert any("Circuit breaker open" in e for e in fallback_errors)
            metrics = system.get_metrics()
            assert metrics["circuit_breaker"]["times_opened"] >= 1 and metrics["circuit_breaker"]["state"] != "closed"
            assert metrics["rule_fallbacks"] == len(fallback_errors)

            server = start_rule_server(tmp_path / "server.log", port=int(server.url.rsplit(":", 1)[1]))
            for attempt in range(RECOVERY_ATTEMPTS):
                result = system.reward(**numbered_item(9000 + attempt)[0])
                if result["source"] == "judge":
                    break
                time.sleep(RECOVERY_PAUSE_S)
            assert result["source"] == "judge", result
            assert system.get_metrics()["circuit_breaker"]["state"] == "closed"
    finally:
        server.stop()
