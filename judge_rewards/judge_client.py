"""The judge client behind the reward adapter: ONE asyncio event loop in a background thread turns
`submit()` calls from any number of threads into `POST /batch_judge` requests.

- Batching: a batch is sent when it holds `max_batch_size` items or `batch_timeout` seconds after its
  first item; at most `max_concurrent_requests` batches are in flight.
- Results are matched to requests by `request_id`, never by position.
- Identical requests in flight share one judgement (one future).
- Retried as judge_core.protocol.http_retry says: timeouts, connection errors, 408, 429 and 5xx, with
  exponential backoff and full jitter (or the Retry-After); other 4xx answers (404, 413, 422, ...) are permanent
  failures: a retry would get the same.
- A circuit breaker opens after `circuit_breaker_threshold` consecutive failed batches (circuit_breaker).
- Every submitted request ends with a result or a `JudgeUnavailableError` saying why; none is dropped. Any
  failure of a batch, a malformed answer or an unforeseen error included, settles all of that batch's
  requests at once and counts as a failed batch; other batches are not affected.

The same worker, HTTP connections, retries and circuit breaker serve `submit_group()`: one
`POST /judge_group` per GRPO group (a prompt and its N completions, compared pairwise by the server; each
completion's reward is its mean win probability against its siblings). Groups are not batched together:
each is one request, sent at once, at most `max_concurrent_requests` in flight with the batches.

The reward adapter (judge_reward_adapter) and evaluation's HTTP judge (evaluation.judges) both use it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from judge_core.protocol import http_retry, judge_api
from judge_core.protocol.judge_api import JudgeItem

from .circuit_breaker import CircuitBreaker, Permit
from .reward_config import JudgeRewardConfig
from .reward_metrics import RewardMetrics

log = logging.getLogger("JudgeReward")

CLOSE_TIMEOUT_S = 5.0
CLOSED_MESSAGE = "judge client is closed"


class JudgeUnavailableError(RuntimeError):
    """The judge gave no score for a request; the message says why (circuit open, queue full, timeout,
    HTTP error, malformed response, or the judge's own error for that item). `permanent`: the judge
    refused the batch with an answer a retry would get again (a 4xx other than 408 and 429: wrong API key,
    wrong URL, body too large, invalid request), so every later batch would fail the same way."""

    def __init__(self, message: str, request_id: str | None = None, permanent: bool = False):
        super().__init__(message)
        self.request_id = request_id
        self.permanent = permanent


@dataclass(frozen=True)
class JudgeResult:
    score: float
    request_id: str
    explanation: str = ""
    detailed_scores: dict | None = field(default=None, compare=False)
    metadata: dict = field(default_factory=dict, compare=False)  # e.g. a scalar judge's raw_reward


@dataclass(frozen=True)
class GroupReward:
    """One completion's outcome in a /judge_group answer: `score` is its mean win probability over the
    `comparisons` that answered (None when none did); `failed` comparisons are summarised in `error`;
    `orders_agreed` of the answered ones chose the same response in both orders (None: the judge does not say)."""

    score: float | None
    comparisons: int
    failed: int
    error: str | None
    orders_agreed: int | None = None


@dataclass(frozen=True)
class GroupResult:
    request_id: str
    rewards: tuple[GroupReward, ...]
    schedule: str
    comparisons_run: int
    metadata: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class GroupRequest:
    """One GRPO group to judge: a prompt (text or messages) and its completions, and the pairing schedule."""

    prompt: Any
    completions: tuple[str, ...]
    schedule: str = "all_pairs"
    k: int | None = None
    seed: int = 0

    def body(self, request_id: str) -> dict:
        prompt = self.prompt if isinstance(self.prompt, str) else list(self.prompt)
        body = {
            "prompt": prompt,
            "completions": list(self.completions),
            "schedule": self.schedule,
            "seed": self.seed,
            "request_id": request_id,
        }
        if self.k is not None:
            body["k"] = self.k
        return body


@dataclass
class _Pending:
    request: JudgeItem
    key: str
    request_id: str
    future: concurrent.futures.Future


class BatchingJudgeClient:
    def __init__(self, config: JudgeRewardConfig, metrics: RewardMetrics):
        self.config = config
        self.metrics = metrics
        self.breaker = CircuitBreaker(config.circuit_breaker_threshold, config.circuit_breaker_timeout)
        self._url = config.judge_url.rstrip("/") + "/batch_judge"
        self._group_url = config.judge_url.rstrip("/") + "/judge_group"
        self._headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._lock = threading.Lock()
        self._in_flight: dict[str, concurrent.futures.Future] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None
        self._sending: set[asyncio.Task] = set()  # the worker's batches in flight (touched on its loop only)
        self._thread: threading.Thread | None = None
        self._owner_pid: int | None = None
        self._closed = False
        self._groups_in_flight: set[concurrent.futures.Future] = set()
        self._http: httpx.AsyncClient | None = None
        self._http_ready: asyncio.Event | None = None
        self._slots: asyncio.Semaphore | None = None

    @property
    def result_timeout(self) -> float:
        """How long a caller waits for its result: every attempt timing out, plus the longest backoffs
        between them (a Retry-After may ask for BACKOFF_CAP_S each time)."""
        attempts = self.config.max_retries + 1
        backoffs = self.config.max_retries * http_retry.BACKOFF_CAP_S
        return self.config.batch_timeout + attempts * self.config.timeout + backoffs + 1.0

    def submit(self, request: JudgeItem) -> concurrent.futures.Future:
        """A future of the JudgeResult of `request` (it raises JudgeUnavailableError when there is none)."""
        return self.submit_all([request])[0]

    def submit_all(self, requests: Sequence[JudgeItem]) -> list[concurrent.futures.Future]:
        """A future per request, in order. The requests are queued together, so that with batch_timeout 0
        they still go out in as few batches as max_batch_size allows."""
        queued: list[_Pending] = []
        with self._lock:
            if self._closed:
                return [_failed(CLOSED_MESSAGE) for _ in requests]
            self._start_if_needed()
            futures = [self._admit(request, queued) for request in requests]
            if queued:
                self._loop.call_soon_threadsafe(_put_all, self._queue, queued)
        for pending in queued:  # outside the lock: a callback of a settled future runs at once and takes it
            pending.future.add_done_callback(lambda done, key=pending.key: self._forget(key, done))
        return futures

    def submit_group(self, group: GroupRequest) -> concurrent.futures.Future:
        """A future of the GroupResult of `group` (it raises JudgeUnavailableError when there is none)."""
        with self._lock:
            if self._closed:
                return _failed(CLOSED_MESSAGE)
            self._start_if_needed()
            if self.breaker.rejects_now():
                return _failed(
                    f"Circuit breaker open: {self.breaker.snapshot()['failures']} consecutive failed requests "
                    f"to {self.config.judge_url}; one probe goes out {self.config.circuit_breaker_timeout}s "
                    f"after the circuit opened"
                )
            future = concurrent.futures.Future()
            self._groups_in_flight.add(future)
            self.metrics.queue_changed(+1)
            asyncio.run_coroutine_threadsafe(self._send_group(group, uuid.uuid4().hex, future), self._loop)
        future.add_done_callback(self._forget_group)
        return future

    def _forget_group(self, future: concurrent.futures.Future) -> None:
        with self._lock:
            if future in self._groups_in_flight:
                self._groups_in_flight.discard(future)
                self.metrics.queue_changed(-1)

    def _admit(self, request: JudgeItem, queued: list[_Pending]) -> concurrent.futures.Future:
        """The future of `request` (the lock held): the one of an identical request in flight, a failed one
        when the circuit is open or the queue full, else a new one whose request joins `queued`."""
        key = request.key()
        shared = self._in_flight.get(key)
        if shared is not None:
            self.metrics.count("deduplicated")
            return shared
        if self.breaker.rejects_now():
            return _failed(
                f"Circuit breaker open: {self.breaker.snapshot()['failures']} consecutive failed batches "
                f"to {self.config.judge_url}; one probe batch goes out {self.config.circuit_breaker_timeout}s "
                f"after the circuit opened"
            )
        if self.metrics.queue_size >= self.config.max_queue_size:
            self.metrics.count("rejected_queue_full")
            return _failed(
                f"Request queue full: {self.metrics.queue_size} requests waiting or in flight "
                f"(max_queue_size={self.config.max_queue_size})"
            )
        future = concurrent.futures.Future()
        self._in_flight[key] = future
        self.metrics.queue_changed(+1)
        queued.append(_Pending(request, key, uuid.uuid4().hex, future))
        return future

    def close(self) -> None:
        """Fail every request still queued or in flight with 'judge client is closed' at once, then stop
        the worker: its batches in flight are abandoned, not waited for."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
            orphans = list(self._in_flight.values()) + list(self._groups_in_flight)
        for future in orphans:
            _settle(future, error=JudgeUnavailableError(CLOSED_MESSAGE))
        if thread is not None and thread.is_alive() and self._owner_pid == os.getpid():
            loop.call_soon_threadsafe(self._stop_worker)
            thread.join(CLOSE_TIMEOUT_S)

    # ---- the worker thread ------------------------------------------------------------------------

    def _start_if_needed(self) -> None:
        """Start the worker on first use, and again in a forked child (threads do not survive a fork)."""
        if self._thread is not None and self._owner_pid == os.getpid():
            return
        # a forked child does not inherit the parent's requests
        self.metrics.queue_changed(-len(self._in_flight) - len(self._groups_in_flight))
        self._in_flight.clear()
        self._groups_in_flight.clear()
        self._owner_pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._queue = asyncio.Queue()
        self._sending = set()
        self._http_ready = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="JudgeReward-client", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except Exception:  # a bug here must not leave callers waiting: their requests fail with the reason
            log.exception("the judge client worker stopped")
            with self._lock:
                self._closed = True
                orphans = list(self._in_flight.values()) + list(self._groups_in_flight)
            for future in orphans:
                _settle(future, error=JudgeUnavailableError("judge client worker stopped (see the JudgeReward log)"))
        finally:
            self._loop.close()

    def _stop_worker(self) -> None:
        """On the worker's loop: the stop signal, and the batches in flight cancelled (their futures are
        settled already), so that the worker ends without waiting for the judge."""
        self._queue.put_nowait(None)
        for task in self._sending:
            task.cancel()

    def _forget(self, key: str, future: concurrent.futures.Future) -> None:
        with self._lock:
            if self._in_flight.get(key) is future:
                del self._in_flight[key]
                self.metrics.queue_changed(-1)

    async def _serve(self) -> None:
        limits = httpx.Limits(
            max_connections=self.config.max_concurrent_requests,
            max_keepalive_connections=self.config.max_concurrent_requests,
        )
        async with httpx.AsyncClient(timeout=self.config.timeout, limits=limits, headers=self._headers) as http:
            slots = asyncio.Semaphore(self.config.max_concurrent_requests)
            self._http, self._slots = http, slots
            self._http_ready.set()
            getter: asyncio.Future | None = None
            stopping = False
            while not stopping:
                # The first item is awaited without a slot: while no batch waits, a group request may take it.
                first = await (getter or self._queue.get())
                if first is None:
                    break
                await slots.acquire()
                batch, getter, stopping = await self._collect_batch(first)
                task = asyncio.create_task(self._send(http, batch))
                self._sending.add(task)
                task.add_done_callback(lambda done: (self._sending.discard(done), slots.release()))
            await asyncio.gather(*self._sending, return_exceptions=True)  # cancelled ones included

    async def _collect_batch(self, first: _Pending):
        """(the batch that starts with `first`, the pending queue getter to reuse, whether the stop signal came).

        A getter that times out is kept for the next batch instead of being cancelled, so no item is
        lost between a timeout and a cancellation."""
        getter = None
        batch = [first]
        deadline = asyncio.get_running_loop().time() + self.config.batch_timeout
        while len(batch) < self.config.max_batch_size:
            if not self._queue.empty():
                item = self._queue.get_nowait()
            else:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                getter = asyncio.ensure_future(self._queue.get())
                done, _ = await asyncio.wait({getter}, timeout=remaining)
                if not done:
                    return batch, getter, False
                item = getter.result()
            if item is None:
                return batch, None, True
            batch.append(item)
        return batch, None, False

    async def _send(self, http: httpx.AsyncClient, batch: list[_Pending]) -> None:
        """Send one batch and settle every one of its futures: with its own result, or all at once with
        the reason there is none."""
        if self._closed:
            _fail_all(batch, CLOSED_MESSAGE)
            return
        permit = self.breaker.try_acquire()
        if permit is None:
            _fail_all(
                batch,
                "Circuit breaker open: the judge is not answering; this batch was not sent "
                f"(probe after {self.config.circuit_breaker_timeout}s)",
            )
            return
        self.metrics.batch_sent(len(batch))
        try:
            body = await self._post_with_retries(
                http, {"requests": [p.request.request_body(p.request_id) for p in batch]}
            )
            outcomes = _outcomes(batch, body)
        except JudgeUnavailableError as err:
            log.warning("judge batch of %d failed: %s", len(batch), err)
            self._batch_failed(batch, permit, err)
            return
        except Exception as err:  # an answer no check foresaw, or a bug: this batch's callers must not wait
            log.warning("judge batch of %d failed unexpectedly", len(batch), exc_info=True)
            self._batch_failed(batch, permit, JudgeUnavailableError(f"judge batch failed: {type(err).__name__}: {err}"))
            return
        if self.breaker.record_success(permit):
            log.info("Circuit breaker closed: %s answers again", self.config.judge_url)
        for pending, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, JudgeResult):
                _settle(pending.future, result=outcome)
            else:
                _settle(pending.future, error=outcome)

    async def _send_group(self, group: GroupRequest, request_id: str, future: concurrent.futures.Future) -> None:
        """On the worker's loop: send one /judge_group request and settle its future (never left waiting)."""
        task = asyncio.current_task()
        self._sending.add(task)
        try:
            await self._http_ready.wait()
            async with self._slots:
                if self._closed or future.done():
                    _settle(future, error=JudgeUnavailableError(CLOSED_MESSAGE, request_id))
                    return
                permit = self.breaker.try_acquire()
                if permit is None:
                    message = "Circuit breaker open: the judge is not answering; this group was not sent"
                    _settle(future, error=JudgeUnavailableError(message, request_id))
                    return
                self.metrics.batch_sent(len(group.completions))
                try:
                    body = await self._post_with_retries(self._http, group.body(request_id), self._group_url)
                    result = _group_result(body, request_id, len(group.completions))
                except JudgeUnavailableError as err:
                    log.warning("judge group of %d failed: %s", len(group.completions), err)
                    self._record_failure(permit)
                    _settle(future, error=JudgeUnavailableError(str(err), request_id, err.permanent))
                    return
                if self.breaker.record_success(permit):
                    log.info("Circuit breaker closed: %s answers again", self.config.judge_url)
                _settle(future, result=result)
        except Exception as err:  # a bug, or cancelled at close: the caller must not wait
            _settle(future, error=JudgeUnavailableError(f"judge group failed: {type(err).__name__}: {err}", request_id))
            if not isinstance(err, asyncio.CancelledError):
                log.warning("judge group failed unexpectedly", exc_info=True)
        finally:
            self._sending.discard(task)

    def _record_failure(self, permit: Permit) -> None:
        if self.breaker.record_failure(permit):
            log.warning(
                "Circuit breaker open after %d consecutive failed requests; requests fail fast for %.1fs",
                self.breaker.snapshot()["failures"],
                self.config.circuit_breaker_timeout,
            )

    def _batch_failed(self, batch: list[_Pending], permit: Permit, err: JudgeUnavailableError) -> None:
        self._record_failure(permit)
        _fail_all(batch, str(err), err.permanent)

    async def _post_with_retries(self, http: httpx.AsyncClient, body: dict, url: str | None = None) -> Any:
        for attempt in range(self.config.max_retries + 1):
            retry_after = None
            try:
                response = await http.post(url or self._url, json=body)
            except httpx.TimeoutException as err:
                failure = f"judge request timed out after {self.config.timeout}s ({type(err).__name__})"
            except httpx.TransportError as err:
                failure = f"cannot reach the judge at {self.config.judge_url}: {type(err).__name__}: {err}"
            except httpx.RequestError as err:
                raise JudgeUnavailableError(
                    f"judge request failed: {type(err).__name__}: {err} (not retried)", permanent=True
                ) from None
            else:
                if response.status_code < 400:
                    return _json_body(response)
                failure = f"judge answered HTTP {response.status_code}: {judge_api.excerpt(response.text)}"
                if not http_retry.is_retried(response.status_code):
                    raise JudgeUnavailableError(failure + " (not retried)", permanent=True)
                retry_after = http_retry.retry_after_s(response.headers.get("retry-after"))
            if attempt == self.config.max_retries:
                raise JudgeUnavailableError(f"{failure} (attempts: {attempt + 1})")
            self.metrics.count("http_retries")
            await asyncio.sleep(http_retry.backoff_s(attempt, retry_after))


def _json_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise JudgeUnavailableError(
            f"judge returned a body that is not JSON (HTTP {response.status_code}): "
            f"{judge_api.excerpt(response.text)!r}"
        ) from None


def _outcomes(batch: list[_Pending], body: Any) -> list[JudgeResult | JudgeUnavailableError]:
    """Each request's outcome in a /batch_judge answer body, found by its request_id; JudgeUnavailableError
    for the whole batch when the body breaks the API."""
    try:
        responses = judge_api.responses_by_request_id(body)
        return [_outcome(pending, responses.get(pending.request_id)) for pending in batch]
    except judge_api.MalformedAnswer as err:
        raise JudgeUnavailableError(f"judge returned a {err}") from None
    except Exception as err:  # a value the API checks do not foresee: the body is named, not the check
        raise JudgeUnavailableError(
            f"judge returned a malformed /batch_judge body ({type(err).__name__}: {err}): "
            f"{judge_api.excerpt(str(body))}"
        ) from None


def _outcome(pending: _Pending, response: dict | None) -> JudgeResult | JudgeUnavailableError:
    """The request's result, or the judge's reason for not scoring it. The message leaves the request_id
    out (the error carries it): the same reason reads the same for every item."""
    answer = judge_api.item_answer(response, pending.request_id)
    if answer.error is not None:
        return JudgeUnavailableError(f"judge could not score request: {answer.error}", pending.request_id)
    return JudgeResult(answer.score, pending.request_id, answer.explanation, answer.detailed_scores, answer.metadata)


def _group_result(body: Any, request_id: str, size: int) -> GroupResult:
    """The GroupResult of a /judge_group answer body; JudgeUnavailableError naming what breaks the contract."""
    if not isinstance(body, dict):
        raise JudgeUnavailableError(f"judge returned a malformed /judge_group body: {judge_api.excerpt(str(body))}")
    if body.get("request_id") != request_id:
        raise JudgeUnavailableError(
            f"judge answered /judge_group request {request_id} with request_id {body.get('request_id')!r}"
        )
    rewards = body.get("rewards")
    if not isinstance(rewards, list) or len(rewards) != size:
        raise JudgeUnavailableError(
            f"judge returned a malformed /judge_group body: expected {size} rewards, got "
            f"{judge_api.excerpt(str(rewards))}"
        )
    try:
        parsed = tuple(_group_reward(entry, i) for i, entry in enumerate(rewards))
    except (TypeError, ValueError, KeyError) as err:
        raise JudgeUnavailableError(f"judge returned a malformed /judge_group body: {err}") from None
    metadata = body.get("metadata")
    return GroupResult(
        request_id,
        parsed,
        str(body.get("schedule")),
        int(body.get("comparisons_run") or 0),
        metadata if isinstance(metadata, dict) else {},
    )


def _group_reward(entry: Any, index: int) -> GroupReward:
    if not isinstance(entry, dict):
        raise TypeError(f"rewards[{index}] is not an object: {entry!r}")
    score, comparisons, failed, error = (entry.get(k) for k in ("score", "comparisons", "failed", "error"))
    for name, value in (("comparisons", comparisons), ("failed", failed)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"rewards[{index}].{name} must be a count, got {value!r}")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0.0 <= score <= 1.0:
            raise ValueError(f"rewards[{index}].score must be a number in [0, 1] or null, got {score!r}")
        if comparisons == 0:
            raise ValueError(f"rewards[{index}] has a score from 0 comparisons")
    if error is not None and not isinstance(error, str):
        raise TypeError(f"rewards[{index}].error must be text or null, got {error!r}")
    if score is None and not error:
        error = f"none of its {failed} comparisons answered"
    if failed and not error:
        raise ValueError(f"rewards[{index}] has {failed} failed comparisons and no error")
    agreed = entry.get("orders_agreed")
    if agreed is not None and (
        isinstance(agreed, bool) or not isinstance(agreed, int) or not 0 <= agreed <= comparisons
    ):
        raise ValueError(f"rewards[{index}].orders_agreed must be a count up to {comparisons} or null, not {agreed!r}")
    return GroupReward(None if score is None else float(score), comparisons, failed, error, agreed)


def _put_all(queue: asyncio.Queue, items: list[_Pending]) -> None:
    for item in items:
        queue.put_nowait(item)


def _fail_all(batch: list[_Pending], message: str, permanent: bool = False) -> None:
    for pending in batch:
        _settle(pending.future, error=JudgeUnavailableError(message, pending.request_id, permanent))


def _settle(
    future: concurrent.futures.Future, result: JudgeResult | None = None, error: Exception | None = None
) -> None:
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass  # already settled (closed while the answer was on its way)


def _failed(message: str) -> concurrent.futures.Future:
    future = concurrent.futures.Future()
    future.set_exception(JudgeUnavailableError(message))
    return future
