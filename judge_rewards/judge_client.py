"""The judge client behind the reward adapter: ONE asyncio event loop in a background thread turns
`submit()` calls from any number of threads into `POST /batch_judge` requests.

- Batching: a batch is sent when it holds `max_batch_size` items or `batch_timeout` seconds after its
  first item; at most `max_concurrent_requests` batches are in flight.
- Results are matched to requests by `request_id`, never by position.
- Identical requests in flight share one judgement (one future).
- Only timeouts, connection errors, 408, 429 and 5xx are retried, with exponential backoff and full jitter
  (a Retry-After header in seconds sets the wait, up to BACKOFF_CAP_S); other 4xx answers (404, 413, 422,
  ...) are permanent failures: a retry would get the same.
- A circuit breaker opens after `circuit_breaker_threshold` consecutive failed batches (circuit_breaker).
- Every submitted request ends with a result or a `JudgeUnavailableError` saying why; none is dropped. Any
  failure of a batch, a malformed answer or an unforeseen error included, settles all of that batch's
  requests at once and counts as a failed batch; other batches are not affected.

The reward adapter (judge_reward_adapter) and evaluation's HTTP judge (evaluation.judges) both use it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import random
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from .circuit_breaker import CircuitBreaker, Permit
from .protocol import judge_api
from .protocol.judge_api import JudgeItem
from .reward_config import JudgeRewardConfig
from .reward_metrics import RewardMetrics

log = logging.getLogger("JudgeReward")

BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 5.0
CLOSE_TIMEOUT_S = 5.0
RETRIED_4XX = frozenset({408, 429})  # request timeout, too many requests: a later attempt may succeed
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
        self._headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._lock = threading.Lock()
        self._in_flight: dict[str, concurrent.futures.Future] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None
        self._sending: set[asyncio.Task] = set()  # the worker's batches in flight (touched on its loop only)
        self._thread: threading.Thread | None = None
        self._owner_pid: int | None = None
        self._closed = False

    @property
    def result_timeout(self) -> float:
        """How long a caller waits for its result: every attempt timing out, plus the longest backoffs
        between them (a Retry-After may ask for BACKOFF_CAP_S each time)."""
        attempts = self.config.max_retries + 1
        return (
            self.config.batch_timeout + attempts * self.config.timeout + self.config.max_retries * BACKOFF_CAP_S + 1.0
        )

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
            orphans = list(self._in_flight.values())
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
        self.metrics.queue_changed(-len(self._in_flight))  # a forked child does not inherit the parent's requests
        self._in_flight.clear()
        self._owner_pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._queue = asyncio.Queue()
        self._sending = set()
        self._thread = threading.Thread(target=self._run, name="JudgeReward-client", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except Exception:  # a bug here must not leave callers waiting: their requests fail with the reason
            log.exception("the judge client worker stopped")
            with self._lock:
                self._closed = True
                orphans = list(self._in_flight.values())
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
            getter: asyncio.Future | None = None
            stopping = False
            while not stopping:
                await slots.acquire()
                batch, getter, stopping = await self._collect_batch(getter)
                if not batch:
                    slots.release()
                    continue
                task = asyncio.create_task(self._send(http, batch))
                self._sending.add(task)
                task.add_done_callback(lambda done: (self._sending.discard(done), slots.release()))
            await asyncio.gather(*self._sending, return_exceptions=True)  # cancelled ones included

    async def _collect_batch(self, getter):
        """(batch, the pending queue getter to reuse, whether the stop signal came).

        A getter that times out is kept for the next batch instead of being cancelled, so no item is
        lost between a timeout and a cancellation."""
        first = await (getter or self._queue.get())
        if first is None:
            return [], None, True
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

    def _batch_failed(self, batch: list[_Pending], permit: Permit, err: JudgeUnavailableError) -> None:
        if self.breaker.record_failure(permit):
            log.warning(
                "Circuit breaker open after %d consecutive failed batches; requests fail fast for %.1fs",
                self.breaker.snapshot()["failures"],
                self.config.circuit_breaker_timeout,
            )
        _fail_all(batch, str(err), err.permanent)

    async def _post_with_retries(self, http: httpx.AsyncClient, body: dict) -> Any:
        for attempt in range(self.config.max_retries + 1):
            retry_after = None
            try:
                response = await http.post(self._url, json=body)
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
                if response.status_code < 500 and response.status_code not in RETRIED_4XX:
                    raise JudgeUnavailableError(failure + " (not retried)", permanent=True)
                retry_after = _retry_after_s(response)
            if attempt == self.config.max_retries:
                raise JudgeUnavailableError(f"{failure} (attempts: {attempt + 1})")
            self.metrics.count("http_retries")
            await asyncio.sleep(_backoff_s(attempt, retry_after))


def _backoff_s(attempt: int, retry_after: float | None) -> float:
    """Full jitter: spreads the retries of many clients instead of synchronising them."""
    if retry_after is not None:
        return min(BACKOFF_CAP_S, retry_after)
    return random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt))


def _retry_after_s(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


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
