"""Health and metrics (GET/HEAD /health, GET /metrics): what the server hosts and how its queue stands."""

from __future__ import annotations

import time

from fastapi import Response

from .config import ServingConfig
from .metrics import ServerMetrics
from .schemas import HealthResponse
from .serving_base import JudgeService, ServingHandler


class HealthHandler(ServingHandler):
    def __init__(self, service: JudgeService, config: ServingConfig, metrics: ServerMetrics):
        super().__init__(service, config, metrics)
        self._started_at = time.monotonic()

    def health(self) -> HealthResponse:
        identity = self.service.identity
        return HealthResponse(
            status="ok",
            model_loaded=True,
            replica=self.service.replica,
            judge_kind=identity.kind,
            backend=identity.backend,
            backend_reason=identity.backend_reason,
            model_id=identity.model_id,
            model_version=identity.model_version,
            scoring=identity.scoring,
            tokenization=identity.tokenization,
            reads_answer=identity.reads_answer,
            reads_images=identity.reads_images,
            reads_rubric=identity.reads_rubric,
            queue_depth=self.service.queue_depth,
            max_batch_size=self.config.max_batch_size,
            batch_timeout=self.config.batch_timeout,
            batches_run=self.metrics.batches_run,
            judgements_answered=self.metrics.judgements_answered,
            uptime_s=time.monotonic() - self._started_at,
        )

    def prometheus_metrics(self) -> Response:
        return Response(self.metrics.exposition(), media_type=self.metrics.content_type)
