"""Prometheus metrics of one judge server (its own registry: several servers in one process keep apart)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .judges import Verdict

ROUTES = (
    "/judge",
    "/batch_judge",
    "/compare",
    "/batch_compare",
    "/judge_group",
    "/openrlhf/reward",
    "/health",
    "/metrics",
)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ServerMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "judge_http_requests", "HTTP requests by route and status code", ["route", "status"], registry=self.registry
        )
        self._request_seconds = Histogram(
            "judge_http_request_seconds",
            "HTTP request latency by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._judgements = Counter(
            "judge_judgements",
            "judgements answered, by outcome (ok: a score; error: no score)",
            ["outcome"],
            registry=self.registry,
        )
        self._comparisons = Counter(
            "judge_comparisons",
            "comparisons (/compare) answered, by outcome (ok: a score; error: no score)",
            ["outcome"],
            registry=self.registry,
        )
        self._batch_size = Histogram(
            "judge_batch_size",
            "judgements or comparisons per model call",
            buckets=BATCH_SIZE_BUCKETS,
            registry=self.registry,
        )
        self._batch_seconds = Histogram(
            "judge_batch_seconds",
            "duration of one model call (a whole batch)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._scores = Histogram(
            "judge_score",
            "scores answered, by kind (judgement: /judge, /batch_judge; comparison: /compare, /batch_compare)",
            ["kind"],
            buckets=SCORE_BUCKETS,
            registry=self.registry,
        )
        self._queue_depth = Gauge(
            "judge_queue_depth", "judgements accepted and not answered yet", registry=self.registry
        )

    def watch_queue_depth(self, read: Callable[[], int]) -> None:
        self._queue_depth.set_function(read)

    def observe_request(self, path: str, status: int, seconds: float) -> None:
        route = path if path in ROUTES else "other"  # unknown paths share one label: bounded cardinality
        self._requests.labels(route, str(status)).inc()
        self._request_seconds.labels(route).observe(seconds)

    def observe_batch(self, size: int, seconds: float) -> None:
        self._batch_size.observe(size)
        self._batch_seconds.observe(seconds)

    def count_verdicts(self, verdicts: Iterable[Verdict], comparisons: bool = False) -> None:
        counter = self._comparisons if comparisons else self._judgements
        kind = "comparison" if comparisons else "judgement"
        for verdict in verdicts:
            counter.labels("error" if verdict.error else "ok").inc()
            if verdict.score is not None:
                self._scores.labels(kind).observe(verdict.score)

    @property
    def batches_run(self) -> int:
        return int(self.registry.get_sample_value("judge_batch_size_count") or 0)

    @property
    def judgements_answered(self) -> int:
        return int(
            sum(
                self.registry.get_sample_value("judge_judgements_total", {"outcome": outcome}) or 0
                for outcome in ("ok", "error")
            )
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
