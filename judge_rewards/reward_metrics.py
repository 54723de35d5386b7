"""Counters of the reward adapter, shared by the adapter (cache, sources) and its judge client (batches,
queue, latency), read as one dict by `get_metrics()`."""

from __future__ import annotations

import collections
import threading

LATENCY_WINDOW = 10_000  # the percentiles describe the most recent judgements


class RewardMetrics:
    def __init__(self):
        self._lock = threading.Lock()
        self._counts = collections.Counter()
        self._latencies = collections.deque(maxlen=LATENCY_WINDOW)
        self._in_queue = 0

    def count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def judge_answered(self, latency_s: float) -> None:
        with self._lock:
            self._counts["judge_successes"] += 1
            self._latencies.append(latency_s)

    def batch_sent(self, size: int) -> None:
        with self._lock:
            self._counts["batches_sent"] += 1
            self._counts["items_sent"] += size
            if size > 1:
                self._counts["items_sent_in_batches"] += size

    def queue_changed(self, delta: int) -> None:
        with self._lock:
            self._in_queue += delta

    @property
    def queue_size(self) -> int:
        with self._lock:
            return self._in_queue

    def snapshot(self) -> dict:
        with self._lock:
            counts = collections.Counter(self._counts)
            latencies = sorted(self._latencies)
            in_queue = self._in_queue
        judged = counts["judge_successes"] + counts["judge_failures"]
        return {
            "total_requests": counts["total_requests"],
            "cache_hits": counts["cache_hits"],
            "cache_hit_rate": _ratio(counts["cache_hits"], counts["total_requests"]),
            "judge_successes": counts["judge_successes"],
            "judge_failures": counts["judge_failures"],
            "error_rate": _ratio(counts["judge_failures"], judged),
            "rule_fallbacks": counts["rule_fallbacks"],
            "deduplicated": counts["deduplicated"],
            "latency": {
                "p50": _percentile(latencies, 0.50),
                "p95": _percentile(latencies, 0.95),
                "count": len(latencies),
            },
            "current_queue_size": in_queue,
            "rejected_queue_full": counts["rejected_queue_full"],
            "batches_sent": counts["batches_sent"],
            "items_sent": counts["items_sent"],
            "mean_batch_size": _ratio(counts["items_sent"], counts["batches_sent"]),
            "batched_fraction": _ratio(counts["items_sent_in_batches"], counts["items_sent"]),
            "http_retries": counts["http_retries"],
        }


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _percentile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
