"""The reward adapter: a drop-in `RewardSystem` whose rewards come from a judge server.

    from judge_rewards import JudgeRewardSystem as RewardSystem
    reward_system = RewardSystem(config.get("reward", {}).get("config", {}))
    reward_system.reward(prompt, completion, answer)  # {'reward': 0.95, 'source': 'judge', ...}

Calls from any number of threads are coalesced into batched HTTP requests by one background worker
(judge_client). Every reward says where it came from: `judge`, `cache`, or `rule_fallback` (the judge
could not answer and judge_rewards.rules scored it; `error` says why). With `fallback_to_rule: false`
a judge failure raises JudgeUnavailableError instead. No request is dropped or silently scored 0.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cachetools import LRUCache

from . import rules
from .judge_client import BatchingJudgeClient, JudgeResult, JudgeUnavailableError
from .protocol.judge_api import JudgeItem
from .reward_config import JudgeRewardConfig
from .reward_health import RewardHealth
from .reward_metrics import RewardMetrics

log = logging.getLogger("JudgeReward")

SOURCE_JUDGE = "judge"
SOURCE_CACHE = "cache"
SOURCE_RULE_FALLBACK = "rule_fallback"
MAX_BATCH_THREADS = 256
FALLBACK_WARNING_INTERVAL_S = 10.0
AGGREGATES = ("mean", "vote")

ConfigLike = Mapping[str, Any] | JudgeRewardConfig | None


class BaseJudgeReward:
    """Rewards from a judge server. Subclass and override `_request_judge` to change how one request
    is judged (e.g. rewrite the request, post-process the score); cache, fallback and metrics stay."""

    def __init__(self, config: ConfigLike = None):
        self.config = config if isinstance(config, JudgeRewardConfig) else JudgeRewardConfig.from_mapping(config)
        self._metrics = RewardMetrics()
        self._client = BatchingJudgeClient(self.config, self._metrics)
        self._cache = LRUCache(maxsize=self.config.cache_size) if self.config.use_cache else None
        self._cache_lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._fallback_warnings = _ThrottledWarning(FALLBACK_WARNING_INTERVAL_S)
        self._health = RewardHealth(self.config, lambda: _ThrottledWarning(FALLBACK_WARNING_INTERVAL_S))
        log.info("judge reward adapter: %s", self.config.redacted())

    def reward(self, prompt, completion: str, answer: Any = None, answer_type: str | None = None) -> dict:
        """{'reward', 'source', 'explanation', 'request_id', 'error', 'detailed_scores'} for one completion."""
        request, cached = self._lookup(prompt, completion, answer, answer_type)
        if cached is not None:
            return cached
        started = time.monotonic()
        try:
            result = self._request_judge(request)
        except JudgeUnavailableError as err:
            self._metrics.count("judge_failures")
            return self._fallback(request, err)
        return self._answered(request, result, started)

    async def areward(self, prompt, completion: str, answer: Any = None, answer_type: str | None = None) -> dict:
        """`reward()` for asyncio callers: awaits the judge's answer without holding a thread while it is
        on its way (the rule fallback, when needed, runs in a worker thread: it may compute)."""
        request, cached = self._lookup(prompt, completion, answer, answer_type)
        if cached is not None:
            return cached
        started = time.monotonic()
        try:
            result = await self._arequest_judge(request)
        except JudgeUnavailableError as err:
            self._metrics.count("judge_failures")
            return await asyncio.to_thread(self._fallback, request, err)
        return self._answered(request, result, started)

    def reward_batch(self, items: Iterable[Mapping[str, Any]], return_exceptions: bool = False) -> list:
        """`reward(**item)` for each item ({prompt, completion, answer?, answer_type?}), in order, all
        in flight at once. With return_exceptions, a failed item's entry is its JudgeUnavailableError
        instead of the call raising it."""
        items = list(items)

        def one(item: Mapping[str, Any]):
            try:
                return self.reward(**item)
            except JudgeUnavailableError as err:
                if return_exceptions:
                    return err
                raise

        return list(self._thread_pool().map(one, items))

    def _request_judge(self, request: JudgeItem) -> JudgeResult:
        """The judge's result for one request (blocking), or JudgeUnavailableError."""
        future = self._client.submit(request)
        try:
            return future.result(timeout=self._client.result_timeout)
        except concurrent.futures.TimeoutError:
            raise self._result_timeout_error() from None

    async def _arequest_judge(self, request: JudgeItem) -> JudgeResult:
        """`_request_judge` awaited. A subclass that overrides only `_request_judge` keeps its behaviour: its
        override runs in a worker thread."""
        if type(self)._request_judge is not BaseJudgeReward._request_judge:
            return await asyncio.to_thread(self._request_judge, request)
        # shield: a timeout stops the waiting, not the request (it ends in the background, as in _request_judge)
        answer = asyncio.shield(asyncio.wrap_future(self._client.submit(request)))
        try:
            return await asyncio.wait_for(answer, self._client.result_timeout)
        except asyncio.TimeoutError:
            raise self._result_timeout_error() from None

    def _result_timeout_error(self) -> JudgeUnavailableError:
        return JudgeUnavailableError(
            f"Timeout waiting for results: no judge answer within {self._client.result_timeout:.1f}s "
            f"({self._metrics.queue_size} requests waiting or in flight); the judge is too slow for this load"
        )

    def _lookup(self, prompt, completion: str, answer: Any, answer_type: str | None) -> tuple[JudgeItem, dict | None]:
        """The checked request, and its cached reward (None when the judge must be asked)."""
        request = JudgeItem.create(prompt, completion, answer, answer_type)
        self._metrics.count("total_requests")
        cached = self._cache_get(request)
        if cached is None:
            return request, None
        self._metrics.count("cache_hits")
        return request, self._observed(request, _reward_dict(cached, SOURCE_CACHE))

    def _answered(self, request: JudgeItem, result: JudgeResult, started: float) -> dict:
        self._metrics.judge_answered(time.monotonic() - started)
        self._cache_put(request, result)
        return self._observed(request, _reward_dict(result, SOURCE_JUDGE))

    def get_metrics(self) -> dict:
        metrics = self._metrics.snapshot()
        metrics["circuit_breaker"] = self._client.breaker.snapshot()
        metrics["judge_url"] = self.config.judge_url
        metrics["reward_health"] = self.health_figures()
        return metrics

    def health_figures(self, fresh: bool = True) -> dict[str, float]:
        """The reward-health figures of the recent rewards (judge_rewards.reward_health); fresh=False: the cached
        ones, cheap enough to read after every reward."""
        return self._health.figures(fresh)

    def _observed(self, request: JudgeItem, reward: dict) -> dict:
        self._health.observe(request, reward)
        return reward

    def close(self) -> None:
        """Stop the background worker and the batch threads."""
        self._client.close()
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __reduce__(self):
        # Threads and connections do not travel: a copy in another process starts its own worker.
        return type(self), (self.config,)

    def _fallback(self, request: JudgeItem, err: JudgeUnavailableError) -> dict:
        if not self.config.fallback_to_rule:
            raise err
        result = rule_fallback(request, err)
        self._metrics.count("rule_fallbacks")
        self._fallback_warnings.warn(f"judge unavailable, rewards come from rules (source=rule_fallback): {err}")
        return self._observed(request, result)

    def _cache_get(self, request: JudgeItem) -> JudgeResult | None:
        if self._cache is None:
            return None
        with self._cache_lock:
            return self._cache.get(request.key())

    def _cache_put(self, request: JudgeItem, result: JudgeResult) -> None:
        if self._cache is not None:
            with self._cache_lock:
                self._cache[request.key()] = result

    def _thread_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """Threads that wait for batch items: enough to fill every concurrent request's batch."""
        with self._pool_lock:
            if self._pool is None:
                size = min(MAX_BATCH_THREADS, self.config.max_batch_size * self.config.max_concurrent_requests)
                self._pool = concurrent.futures.ThreadPoolExecutor(size, thread_name_prefix="JudgeReward-batch")
            return self._pool


JudgeRewardSystem = BaseJudgeReward  # the name training scripts import in place of their RewardSystem


def rule_fallback(request: JudgeItem, err: JudgeUnavailableError) -> dict:
    """The rule-based reward of a request the judge could not score; JudgeUnavailableError when the rule
    cannot score it either (no reference answer, or one unfit for its answer type)."""
    try:
        rule = rules.score_answer(request.completion, request.answer, request.answer_type)
    except ValueError as rule_error:
        raise JudgeUnavailableError(
            f"{err}; the rule fallback cannot score it either: {rule_error}", err.request_id
        ) from err
    return {
        "reward": rule.score,
        "source": SOURCE_RULE_FALLBACK,
        "explanation": rule.explanation,
        "request_id": err.request_id,
        "error": str(err),
        "detailed_scores": None,
    }


def _reward_dict(result: JudgeResult, source: str) -> dict:
    return {
        "reward": result.score,
        "source": source,
        "explanation": result.explanation,
        "request_id": result.request_id,
        "error": None,
        "detailed_scores": result.detailed_scores,
    }


class _ThrottledWarning:
    """At most one warning per interval, with the count of those held back (a dead judge would
    otherwise log once per sample)."""

    def __init__(self, interval_s: float):
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._last = -float("inf")
        self._held_back = 0

    def warn(self, message: str) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last < self._interval_s:
                self._held_back += 1
                return
            held_back, self._held_back, self._last = self._held_back, 0, now
        log.warning("%s%s", message, f" (+{held_back} similar since the last warning)" if held_back else "")


class MultiCritiqueJudge:
    """Several judge servers score every item; their rewards are combined by `aggregate`:
    mean: the mean of the judges' rewards; vote: 1.0 when most judges give >= 0.5, 0.0 when most give
    less, 0.5 on a tie. Judges that fail are left out (listed in `error`); when all fail, the rule
    fallback answers (or JudgeUnavailableError with fallback_to_rule off)."""

    def __init__(self, judge_urls: Sequence[str], aggregate: str = "mean", config: ConfigLike = None):
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate {aggregate!r} is not one of {AGGREGATES}")
        if not judge_urls:
            raise ValueError("MultiCritiqueJudge needs at least one judge URL")
        base = dataclasses.asdict(config) if isinstance(config, JudgeRewardConfig) else dict(config or {})
        self.aggregate = aggregate
        self.fallback_to_rule = JudgeRewardConfig.from_mapping({**base, "judge_url": judge_urls[0]}).fallback_to_rule
        self.judges = [JudgeRewardSystem({**base, "judge_url": url, "fallback_to_rule": False}) for url in judge_urls]

    def reward(self, prompt, completion: str, answer: Any = None, answer_type: str | None = None) -> dict:
        return self.reward_batch(
            [{"prompt": prompt, "completion": completion, "answer": answer, "answer_type": answer_type}]
        )[0]

    def reward_batch(self, items: Iterable[Mapping[str, Any]]) -> list[dict]:
        items = list(items)
        with concurrent.futures.ThreadPoolExecutor(len(self.judges)) as pool:
            per_judge = list(pool.map(lambda judge: judge.reward_batch(items, return_exceptions=True), self.judges))
        return [self._combine(item, [answers[i] for answers in per_judge]) for i, item in enumerate(items)]

    def get_metrics(self) -> dict:
        return {judge.config.judge_url: judge.get_metrics() for judge in self.judges}

    def close(self) -> None:
        for judge in self.judges:
            judge.close()

    def _combine(self, item: Mapping[str, Any], answers: list) -> dict:
        rewards = [a for a in answers if isinstance(a, dict)]
        errors = [
            f"{judge.config.judge_url}: {a}"
            for judge, a in zip(self.judges, answers, strict=True)
            if not isinstance(a, dict)
        ]
        if not rewards:
            err = JudgeUnavailableError("no judge answered: " + "; ".join(errors))
            if not self.fallback_to_rule:
                raise err
            request = JudgeItem.create(item["prompt"], item["completion"], item.get("answer"), item.get("answer_type"))
            return {**rule_fallback(request, err), "judges": [None] * len(answers)}
        scores = [r["reward"] for r in rewards]
        source = SOURCE_CACHE if all(r["source"] == SOURCE_CACHE for r in rewards) else SOURCE_JUDGE
        return {
            "reward": _aggregate(scores, self.aggregate),
            "source": source,
            "explanation": f"{self.aggregate} of {len(scores)}/{len(answers)} judges: {[round(s, 3) for s in scores]}",
            "request_id": None,
            "error": "; ".join(errors) or None,
            "detailed_scores": None,
            "judges": [a if isinstance(a, dict) else None for a in answers],
        }


def _aggregate(scores: list[float], how: str) -> float:
    if how == "mean":
        return sum(scores) / len(scores)
    passes = sum(score >= 0.5 for score in scores)
    fails = len(scores) - passes
    return 1.0 if passes > fails else 0.0 if fails > passes else 0.5


def create_judge_reward(config: Mapping[str, Any]) -> BaseJudgeReward | MultiCritiqueJudge:
    """A JudgeRewardSystem for `config`; with `judge_urls: [...]` (and `aggregate: mean|vote`) instead
    of `judge_url`, a MultiCritiqueJudge over those servers."""
    config = dict(config)
    if "judge_urls" in config:
        urls = config.pop("judge_urls")
        return MultiCritiqueJudge(urls, config.pop("aggregate", "mean"), config)
    return JudgeRewardSystem(config)
