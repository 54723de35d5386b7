"""The reward adapter: a drop-in `RewardSystem` whose rewards come from a judge server.

    from judge_rewards import JudgeRewardSystem as RewardSystem
    reward_system = RewardSystem(config.get("reward", {}).get("config", {}))
    reward_system.reward(prompt, completion, answer)  # {'reward': 0.95, 'source': 'judge', ...}

Calls from any number of threads are coalesced into batched HTTP requests by one background worker
(judge_client). Every reward says where it came from: `judge`, `cache`, or `rule_fallback` (the judge
could not answer and judge_core.rules scored it; `error` says why). With `fallback_to_rule: false`
a judge failure raises JudgeUnavailableError instead. No request is dropped or silently scored 0.

With `group_relative: true` (a pairwise judge, no reference answer needed) a batch's completions are grouped
by prompt and each group goes to POST /judge_group (groups in parallel): a completion's reward is its mean
win probability against its siblings, and its dict carries `comparisons` (that answered) and `failed`. A
completion none of whose comparisons answered goes to the fallback like any failure. Such a reward depends
on the siblings, so the cache keys on the whole group. Per-sample callers (`areward`, verl 0.9's reward
loop) are gathered into groups of `group_size` by prompt, waiting at most `group_window` seconds after a
group's first sample (that wait is the mode's latency cost per group when a group arrives incomplete).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cachetools import LRUCache

from judge_core import rules
from judge_core.protocol.groups import GroupGatherer
from judge_core.protocol.judge_api import JudgeItem, prompt_key

from .composed_reward import ComposedReward
from .judge_client import BatchingJudgeClient, GroupRequest, GroupResult, JudgeResult, JudgeUnavailableError
from .reward_config import JudgeRewardConfig
from .reward_health import RewardHealth
from .reward_metrics import RewardMetrics
from .reward_spec import has_spec, with_spec_file

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
        self._composed = None
        config = with_spec_file(config)
        if has_spec(config):  # a reward spec (judge_rewards.reward_spec): its components do the judging
            self._mapping = dict(config)
            self._composed = ComposedReward(
                config, lambda: _ThrottledWarning(FALLBACK_WARNING_INTERVAL_S), BaseJudgeReward
            )
            self.config = self._composed.config
            return
        self.config = config if isinstance(config, JudgeRewardConfig) else JudgeRewardConfig.from_mapping(config)
        self._metrics = RewardMetrics()
        self._client = BatchingJudgeClient(self.config, self._metrics)
        self._cache = LRUCache(maxsize=self.config.cache_size) if self.config.use_cache else None
        self._cache_lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._fallback_warnings = _ThrottledWarning(FALLBACK_WARNING_INTERVAL_S)
        self._health = RewardHealth(self.config, lambda: _ThrottledWarning(FALLBACK_WARNING_INTERVAL_S))
        self._gatherer = _GroupSender(self) if self.config.group_relative else None
        log.info("judge reward adapter: %s", self.config.redacted())

    @property
    def route_column(self) -> str | None:
        """The column whose value routes a row to its reward spec (data_source in verl); None unless a reward spec
        has routes."""
        spec = self._composed and self._composed.spec
        return spec.route_column if spec and spec.routes else None

    @property
    def group_judge_components(self) -> list[str]:
        """The names of the reward spec's group_judge components (none without a spec)."""
        if self._composed is None:
            return []
        return [name for name, part in self._composed.spec.components.items() if part.type == "group_judge"]

    def reward(
        self,
        prompt,
        completion: str,
        answer: Any = None,
        answer_type: str | None = None,
        data_source: Any = None,
        rubric: Any = None,
    ) -> dict:
        """{'reward', 'source', 'explanation', 'request_id', 'error', 'detailed_scores'} for one completion.
        `rubric` (text or a list of criteria): for a judge served with a template that reads one."""
        item = _item(prompt, completion, answer, answer_type, rubric)
        if self._composed is not None:
            return self._composed.reward_batch([{**item, "data_source": data_source}])[0]
        if self.config.group_relative:
            return self.reward_groups([item])[0]
        request, cached = self._lookup(item)
        if cached is not None:
            return cached
        started = time.monotonic()
        try:
            outcome = self._request_judge(request)
        except JudgeUnavailableError as err:
            outcome = err
        return self._reward_or_error(request, outcome, started, return_exceptions=False)

    async def areward(
        self,
        prompt,
        completion: str,
        answer: Any = None,
        answer_type: str | None = None,
        data_source: Any = None,
        rubric: Any = None,
    ) -> dict:
        """`reward()` for asyncio callers: awaits the judge's answer without holding a thread while it is
        on its way (the rule fallback, when needed, runs in a worker thread: it may compute). In group_relative
        mode the sample waits for its siblings (group_size, group_window) and is judged with them. `data_source`:
        a reward spec's route value (ignored without routes)."""
        item = _item(prompt, completion, answer, answer_type, rubric)
        if self._composed is not None:
            return await self._composed.areward(item, data_source)
        if self.config.group_relative:
            request = _group_item(item)
            self._metrics.count("total_requests")
            return await self._gatherer.areward(request)
        request, cached = self._lookup(item)
        if cached is not None:
            return cached
        started = time.monotonic()
        try:
            result = await self._arequest_judge(request)
        except JudgeUnavailableError as err:
            return await asyncio.to_thread(self._judge_failed, request, err)
        return self._answered(request, result, started)

    def reward_batch(self, items: Iterable[Mapping[str, Any]], return_exceptions: bool = False) -> list:
        """`reward(**item)` for each item ({prompt, completion, answer?, answer_type?}), in order, all
        in flight at once: queued together, so that they go out in as few requests as max_batch_size allows.
        With return_exceptions, a failed item's entry is its JudgeUnavailableError instead of the call raising it."""
        items = list(items)
        if self._composed is not None:
            return self._composed.reward_batch(items, return_exceptions)
        if self.config.group_relative:
            return self.reward_groups(items, return_exceptions)
        if type(self)._request_judge is not BaseJudgeReward._request_judge:
            return self._reward_each(items, return_exceptions)
        looked_up = [self._lookup(item) for item in items]
        started = time.monotonic()
        asked = [request for request, cached in looked_up if cached is None]
        answers = iter(self._wait_all(self._client.submit_all(asked)))
        rewards = []
        for request, cached in looked_up:
            if cached is None:
                cached = self._reward_or_error(request, next(answers), started, return_exceptions)
            rewards.append(cached)
        return rewards

    def _reward_each(self, items: list[Mapping[str, Any]], return_exceptions: bool) -> list:
        """reward_batch of a subclass that overrides `_request_judge`: its override judges each item, from
        pool threads."""

        def one(item: Mapping[str, Any]):
            try:
                return self.reward(**item)
            except JudgeUnavailableError as err:
                if return_exceptions:
                    return err
                raise

        return list(self._thread_pool().map(one, items))

    def _wait_all(self, futures: list[concurrent.futures.Future]) -> list[JudgeResult | JudgeUnavailableError]:
        """Each future's result or error, waiting for all of them at most result_timeout in all."""
        concurrent.futures.wait(futures, timeout=self._client.result_timeout)
        outcomes = []
        for future in futures:
            if not future.done():
                outcomes.append(self._result_timeout_error())
            elif isinstance(future.exception(), JudgeUnavailableError):
                outcomes.append(future.exception())
            else:
                outcomes.append(future.result())
        return outcomes

    def _reward_or_error(
        self, request: JudgeItem, outcome: JudgeResult | JudgeUnavailableError, started: float, return_exceptions: bool
    ):
        if not isinstance(outcome, JudgeUnavailableError):
            return self._answered(request, outcome, started)
        try:
            return self._judge_failed(request, outcome)
        except JudgeUnavailableError as err:
            if return_exceptions:
                return err
            raise

    def reward_groups(self, items: Iterable[Mapping[str, Any]], return_exceptions: bool = False) -> list:
        """Group-relative rewards of `items` ({prompt, completion, answer?, answer_type?}), in order: the items
        of one prompt form a group judged by POST /judge_group, all groups in flight at once. ValueError for a
        prompt with a single completion (nothing to compare it with)."""
        requests = [_group_item(item) for item in items]
        self._metrics.count("total_requests", len(requests))
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(prompt_key(request.prompt), []).append(index)
        for indices in groups.values():
            if len(indices) < 2:
                raise ValueError(
                    f"group_relative reward: the prompt {_prompt_excerpt(requests[indices[0]])} has 1 completion in "
                    f"this batch; a group-relative reward compares a prompt's completions with each other and needs "
                    f"at least 2 (the rollout's n)"
                )
        started = time.monotonic()
        pending = [(indices, *self._submit_group([requests[i] for i in indices])) for indices in groups.values()]
        rewards: list = [None] * len(requests)
        for indices, group, cached, future in pending:
            outcome = cached
            if outcome is None:
                outcome = self._group_outcome(group, future, started)
            for position, index in enumerate(indices):
                try:
                    rewards[index] = self._group_reward(requests[index], outcome, position, cached is not None)
                except JudgeUnavailableError as err:
                    if not return_exceptions:
                        raise
                    rewards[index] = err
        return rewards

    def _submit_group(self, requests: list[JudgeItem]):
        """(the GroupRequest, its cached result or None, the future of its answer or None)."""
        config = self.config
        # A group shorter than group_k + 1 (a window closed early) meets every sibling: k is at most N - 1.
        k = None if config.group_k is None else min(config.group_k, len(requests) - 1)
        group = GroupRequest(
            requests[0].prompt, tuple(r.completion for r in requests), config.group_schedule, k, config.group_seed
        )
        cached = self._cache_get_key(_group_key(group))
        if cached is not None:
            self._metrics.count("cache_hits", len(requests))
            return group, cached, None
        return group, None, self._client.submit_group(group)

    def _group_outcome(self, group: GroupRequest, future, started: float) -> GroupResult | JudgeUnavailableError:
        try:
            result = future.result(timeout=self._client.result_timeout)
        except concurrent.futures.TimeoutError:
            return self._result_timeout_error()
        except JudgeUnavailableError as err:
            return err
        self._metrics.judge_answered(time.monotonic() - started)
        self._cache_put_key(_group_key(group), result)
        return result

    def _group_reward(
        self, request: JudgeItem, outcome: GroupResult | JudgeUnavailableError, position: int, from_cache: bool
    ) -> dict:
        """One completion's reward dict from its group's outcome; the fallback when it has no score."""
        if isinstance(outcome, JudgeUnavailableError):
            return {**self._judge_failed(request, outcome), "comparisons": 0, "failed": 0}
        mine = outcome.rewards[position]
        counts = {"comparisons": mine.comparisons, "failed": mine.failed}
        if mine.score is None:
            reason = f"no comparison of this completion answered: {mine.error}"
            error = JudgeUnavailableError(reason, outcome.request_id)
            return {**self._judge_failed(request, error), **counts}
        reward = {
            "reward": mine.score,
            "source": SOURCE_CACHE if from_cache else SOURCE_JUDGE,
            "explanation": f"mean win probability over {mine.comparisons} comparisons ({outcome.schedule})",
            "request_id": outcome.request_id,
            "error": mine.error,
            "detailed_scores": None,
            **counts,
        }
        return self._observed(request, reward)

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

    def _lookup(self, item: Mapping[str, Any]) -> tuple[JudgeItem, dict | None]:
        """The checked request, and its cached reward (None when the judge must be asked)."""
        request = JudgeItem.create(**item)
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
        if self._composed is not None:
            return self._composed.get_metrics()
        metrics = self._metrics.snapshot()
        metrics["circuit_breaker"] = self._client.breaker.snapshot()
        metrics["judge_url"] = self.config.judge_url
        metrics["reward_health"] = self.health_figures()
        return metrics

    def health_figures(self, fresh: bool = True) -> dict[str, float]:
        """The reward-health figures of the recent rewards (judge_rewards.reward_health); fresh=False: the cached
        ones, cheap enough to read after every reward."""
        if self._composed is not None:
            return self._composed.health_figures(fresh)
        return self._health.figures(fresh)

    def _observed(self, request: JudgeItem, reward: dict) -> dict:
        self._health.observe(request, reward)
        return reward

    def close(self) -> None:
        """Stop the background worker and the batch threads."""
        if self._composed is not None:
            self._composed.close()
            return
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
        return type(self), (self._mapping if self._composed is not None else self.config,)

    def _judge_failed(self, request: JudgeItem, err: JudgeUnavailableError) -> dict:
        """Counts the judge's failure; the rule fallback's reward, or `err` raised where there is none."""
        self._metrics.count("judge_failures")
        if not self.config.fallback_to_rule:
            raise err
        result = rule_fallback(request, err)
        self._metrics.count("rule_fallbacks")
        self._fallback_warnings.warn(f"judge unavailable, rewards come from rules (source=rule_fallback): {err}")
        return self._observed(request, result)

    def _cache_get(self, request: JudgeItem) -> JudgeResult | None:
        return self._cache_get_key(request.key())

    def _cache_put(self, request: JudgeItem, result: JudgeResult) -> None:
        self._cache_put_key(request.key(), result)

    def _cache_get_key(self, key: str):
        if self._cache is None:
            return None
        with self._cache_lock:
            return self._cache.get(key)

    def _cache_put_key(self, key: str, result) -> None:
        if self._cache is not None:
            with self._cache_lock:
                self._cache[key] = result

    def _thread_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """Threads that wait for batch items: enough to fill every concurrent request's batch."""
        with self._pool_lock:
            if self._pool is None:
                size = min(MAX_BATCH_THREADS, self.config.max_batch_size * self.config.max_concurrent_requests)
                self._pool = concurrent.futures.ThreadPoolExecutor(size, thread_name_prefix="JudgeReward-batch")
            return self._pool


JudgeRewardSystem = BaseJudgeReward  # the name training scripts import in place of their RewardSystem


def _item(prompt, completion: str, answer: Any, answer_type: str | None, rubric: Any = None) -> dict:
    item = {"prompt": prompt, "completion": completion, "answer": answer, "answer_type": answer_type}
    return item if rubric is None else {**item, "rubric": rubric}


def _group_item(item: Mapping[str, Any]) -> JudgeItem:
    if item.get("rubric") is not None:
        raise ValueError("rubric: group-relative rewards (POST /judge_group) do not carry a rubric")
    return JudgeItem.create(**item)


def _prompt_excerpt(request: JudgeItem) -> str:
    text = request.prompt if isinstance(request.prompt, str) else prompt_key(request.prompt)
    return repr(text[:120])


def _group_key(group: GroupRequest) -> str:
    """A group reward depends on every sibling: the cache keys on the whole group and its schedule."""
    return json.dumps(
        ["group", prompt_key(group.prompt), group.completions, group.schedule, group.k, group.seed], ensure_ascii=False
    )


class _GroupSender:
    """Per-sample calls gathered into groups by prompt (judge_core.protocol.groups) and sent to /judge_group: a
    group is sent when it holds `group_size` samples, or `group_window` seconds after its first sample (then with
    2 or more; a lone sample gets the fallback, its error naming the prompt). Callers on any event loop or thread
    await their sample's reward."""

    def __init__(self, system: BaseJudgeReward):
        self._system = system
        size = system.config.group_size
        self._gatherer = GroupGatherer(size, system.config.group_window, self._send_in_thread) if size else None

    async def areward(self, request: JudgeItem) -> dict:
        if self._gatherer is None:
            raise ValueError(
                "group_relative reward: a per-sample caller needs group_size (the rollout's n, e.g. "
                "actor_rollout_ref.rollout.n) to gather a prompt's completions into a group"
            )
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._gatherer.add(prompt_key(request.prompt), (request, future))
        return await asyncio.wrap_future(future)

    def _send_in_thread(self, samples: list) -> None:
        """Judged in a thread of its own: the caller's loop must not block, nor a shared pool fill up."""
        threading.Thread(target=self._send, args=(samples,), daemon=True).start()

    def _send(self, samples: list) -> None:
        """Judge the gathered `samples` and settle their futures with their reward dicts."""
        requests = [request for request, _ in samples]
        if len(requests) < 2:
            err = JudgeUnavailableError(
                f"group_relative reward: only 1 completion of the prompt {_prompt_excerpt(requests[0])} arrived within "
                f"group_window={self._system.config.group_window}s (group_size={self._system.config.group_size}); "
                f"nothing to compare it with"
            )
            outcomes = [err]
        else:
            outcomes = self._system.reward_groups([dataclasses.asdict(r) for r in requests], return_exceptions=True)
        for (request, future), outcome in zip(samples, outcomes, strict=True):
            try:
                if isinstance(outcome, JudgeUnavailableError) and len(requests) < 2:
                    outcome = {**self._system._judge_failed(request, outcome), "comparisons": 0, "failed": 0}
            except JudgeUnavailableError as err:
                outcome = err
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)


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
    fallback answers (or JudgeUnavailableError with fallback_to_rule off).

    A reward spec (judge_rewards.reward_spec): one judge component per URL, equal weights, on_failure renormalise,
    combine weighted_sum (the mean) or vote."""

    def __init__(self, judge_urls: Sequence[str], aggregate: str = "mean", config: ConfigLike = None):
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate {aggregate!r} is not one of {AGGREGATES}")
        if not judge_urls:
            raise ValueError("MultiCritiqueJudge needs at least one judge URL")
        base = dataclasses.asdict(config) if isinstance(config, JudgeRewardConfig) else dict(config or {})
        self.aggregate = aggregate
        self.fallback_to_rule = JudgeRewardConfig.from_mapping({**base, "judge_url": judge_urls[0]}).fallback_to_rule
        components = {
            f"judge_{i}": {
                "type": "judge",
                "judge_url": url,
                "weight": 1 / len(judge_urls),
                "on_failure": "renormalise",
            }
            for i, url in enumerate(judge_urls)
        }
        combine = "weighted_sum" if aggregate == "mean" else "vote"
        self.spec = JudgeRewardSystem({**base, "components": components, "combine": combine})
        self.judges = list(self.spec._composed.judges.values())

    def reward(self, prompt, completion: str, answer: Any = None, answer_type: str | None = None) -> dict:
        return self.reward_batch(
            [{"prompt": prompt, "completion": completion, "answer": answer, "answer_type": answer_type}]
        )[0]

    def reward_batch(self, items: Iterable[Mapping[str, Any]]) -> list[dict]:
        items = list(items)
        outcomes = self.spec.reward_batch(items, return_exceptions=True)
        return [self._tagged(item, outcome) for item, outcome in zip(items, outcomes, strict=True)]

    def get_metrics(self) -> dict:
        return {judge.config.judge_url: judge.get_metrics() for judge in self.judges}

    def close(self) -> None:
        self.spec.close()

    def _tagged(self, item: Mapping[str, Any], outcome) -> dict:
        """The spec's reward with the `judges` list (None for those that failed); the rule fallback (or the
        error raised) when no judge answered."""
        if isinstance(outcome, JudgeUnavailableError):
            err = JudgeUnavailableError(f"no judge answered: {outcome}")
            if not self.fallback_to_rule:
                raise err
            request = JudgeItem.create(item["prompt"], item["completion"], item.get("answer"), item.get("answer_type"))
            return {**rule_fallback(request, err), "judges": [None] * len(self.judges)}
        components = list(outcome["components"].values())
        judges = [None if c["reward"] is None else c for c in components]
        scores = [c["reward"] for c in components if c["reward"] is not None]
        errors = [
            f"{j.config.judge_url}: {c['error']}" for j, c in zip(self.judges, components, strict=True) if c["error"]
        ]
        return {
            **outcome,
            "source": SOURCE_CACHE if all(c["source"] == SOURCE_CACHE for c in judges if c) else SOURCE_JUDGE,
            "explanation": f"{self.aggregate} of {len(scores)}/{len(judges)} judges: {[round(s, 3) for s in scores]}",
            "error": "; ".join(errors) or None,
            "judges": judges,
        }


def create_judge_reward(config: Mapping[str, Any]) -> BaseJudgeReward | MultiCritiqueJudge:
    """A JudgeRewardSystem for `config`; with `judge_urls: [...]` (and `aggregate: mean|vote`) instead
    of `judge_url`, a MultiCritiqueJudge over those servers."""
    config = dict(config)
    if "judge_urls" in config:
        urls = config.pop("judge_urls")
        return MultiCritiqueJudge(urls, config.pop("aggregate", "mean"), config)
    return JudgeRewardSystem(config)
