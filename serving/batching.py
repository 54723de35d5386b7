"""Dynamic batching: judgements (and comparisons) of concurrent requests are collected into batches for one
model worker thread, so the event loop never runs the model and every request is answered through its own
future. A batch holds one kind of work: judge items or comparison items. For a judge that computes a shared
prompt once (a scalar judge), a batch takes the queued items prompt by prompt, so that the completions of one
GRPO group, even when they come in separate one-item requests, meet in one batch."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from judge_core.protocol.judge_api import prompt_key

from .judges import ComparisonItem, JudgeItem, Verdict

log = logging.getLogger(__name__)

Work = JudgeItem | ComparisonItem
ScoreBatch = Callable[[Sequence[Work]], list[Verdict]]
BatchObserver = Callable[[int, float], None]


def prompt_of(work: Work) -> str:
    """The key that groups work by prompt (both kinds of work have one)."""
    return prompt_key(work.prompt)


class QueueFull(RuntimeError):
    """More judgements are waiting than the server accepts (--max-queue-size)."""


class BatcherStopped(RuntimeError):
    """The server is shutting down."""


def score_isolating_failures(score_batch: ScoreBatch, items: Sequence[Work]) -> list[Verdict]:
    """The verdicts of `score_batch(items)`; if the call fails, the items are judged one by one so that
    only the item that fails gets the error (e.g. one input too large for the GPU)."""
    try:
        verdicts = score_batch(items)
        if len(verdicts) != len(items):
            raise RuntimeError(f"the judge returned {len(verdicts)} verdicts for {len(items)} items")
        for verdict in verdicts:
            verdict.metadata["batch_size"] = len(items)
        return verdicts
    except Exception as err:  # a failed model call becomes an error verdict, never a score
        if len(items) == 1:
            log.exception("judging one item failed")
            return [Verdict.failed(f"judge failed: {type(err).__name__}: {err}")]
        log.warning("a batch of %d failed (%s: %s); judging its items one by one", len(items), type(err).__name__, err)
        return [verdict for item in items for verdict in score_isolating_failures(score_batch, [item])]


@dataclass
class _Pending:
    item: Work
    future: asyncio.Future
    enqueued_at: float
    prompt: str | None  # prompt_of(item) when batches group by prompt


class DynamicBatcher:
    """Collects up to `max_batch_size` judgements, waiting at most `batch_timeout` seconds after the
    oldest one arrived, and runs each batch on a single model worker thread: judge items through
    `score_batch`, comparison items through `compare_batch`. With `group_by_prompt`, a batch takes the
    queued items of the oldest item's prompt first, then those of the next oldest prompt, and so on."""

    def __init__(
        self,
        score_batch: ScoreBatch,
        max_batch_size: int,
        batch_timeout: float,
        max_queue_size: int,
        on_batch: BatchObserver,
        compare_batch: ScoreBatch,
        group_by_prompt: bool = False,
    ):
        self._group_by_prompt = group_by_prompt
        self._runs = {JudgeItem: score_batch, ComparisonItem: compare_batch}
        self._max_batch_size = max_batch_size
        self._batch_timeout = batch_timeout
        self._max_queue_size = max_queue_size
        self._on_batch = on_batch
        self._waiting: collections.deque[_Pending] = collections.deque()
        self._arrived = asyncio.Event()
        self._unanswered = 0
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge-model")
        self._task: asyncio.Task | None = None

    @property
    def queue_depth(self) -> int:
        """Judgements accepted and not answered yet (waiting or in the running batch)."""
        return self._unanswered

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="judge-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        while self._waiting:
            pending = self._waiting.popleft()
            if not pending.future.done():
                pending.future.set_exception(BatcherStopped("the judge server is shutting down"))
        self._worker.shutdown(wait=False, cancel_futures=True)

    async def submit(self, items: Sequence[Work]) -> list[Verdict]:
        """The verdicts of `items`, in order; they may be judged in different batches."""
        if self._task is None or self._task.done():
            raise BatcherStopped("the judge server is not running")
        if self._unanswered + len(items) > self._max_queue_size:
            raise QueueFull(
                f"{self._unanswered} judgements are queued; {len(items)} more would exceed "
                f"--max-queue-size {self._max_queue_size}"
            )
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        pending = [
            _Pending(item, loop.create_future(), now, prompt_of(item) if self._group_by_prompt else None)
            for item in items
        ]
        self._unanswered += len(pending)
        self._waiting.extend(pending)
        self._arrived.set()
        try:
            return list(await asyncio.gather(*(p.future for p in pending)))
        finally:
            self._unanswered -= len(pending)
            for p in pending:
                p.future.cancel()  # items of a request that is gone (client left, or it failed) are skipped

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._next_batch()
            if not batch:
                continue
            started = time.monotonic()
            run = self._runs[type(batch[0].item)]
            verdicts = await loop.run_in_executor(self._worker, score_isolating_failures, run, [p.item for p in batch])
            self._on_batch(len(batch), time.monotonic() - started)
            for pending, verdict in zip(batch, verdicts, strict=True):
                if not pending.future.done():
                    pending.future.set_result(verdict)

    async def _next_batch(self) -> list[_Pending]:
        """Up to max_batch_size live judgements of the oldest one's kind, once the batch is full or its oldest
        waited batch_timeout; work of the other kind, and what does not fit, keeps its place in the queue.
        Grouping by prompt changes which items the batch takes, never when it runs: the oldest item is always in
        it, and an item gives its place only to items that share a prompt with an older one."""
        while not self._waiting:
            self._arrived.clear()
            await self._arrived.wait()
        deadline = self._waiting[0].enqueued_at + self._batch_timeout
        while len(self._waiting) < self._max_batch_size and (remaining := deadline - time.monotonic()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                break
        kind = type(self._waiting[0].item)
        live = [pending for pending in self._waiting if not pending.future.done()]
        candidates = [pending for pending in live if type(pending.item) is kind]
        if self._group_by_prompt:
            by_prompt: dict[str | None, list[_Pending]] = {}
            for pending in candidates:
                by_prompt.setdefault(pending.prompt, []).append(pending)
            candidates = [pending for group in by_prompt.values() for pending in group]
        batch = candidates[: self._max_batch_size]
        taken = {id(pending) for pending in batch}
        self._waiting = collections.deque(pending for pending in live if id(pending) not in taken)
        return batch
