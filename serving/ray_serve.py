"""Scale-out on Ray Serve: the judge as a deployment of N replicas behind Ray Serve's HTTP proxy.

    python -m serving.ray_serve --model PATH --replicas 2 --port 8888

Each replica loads the judge, batches with Ray Serve's `@serve.batch` (max_batch_size, batch_timeout; one
batcher for judgements, one for comparisons, taking turns on the model) and serves the same HTTP API as
`python -m serving`; the proxy spreads requests over the replicas, and Ray Serve's own queue limit
(`max_queued_requests`) answers 503 past --max-queue-size waiting requests. /health and /metrics
describe the replica that answers them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ray import serve

from judge_core.settings import option, parse_configs, require
from judge_models.config import JudgeConfig

from .app import build_app
from .batching import score_isolating_failures
from .config import HttpConfig, ServingConfig
from .judges import ComparisonItem, JudgeItem, Verdict, load_judge
from .metrics import ServerMetrics

log = logging.getLogger(__name__)

APP_NAME = "judge"
# Replicas drain their requests first (Ray Serve waits up to 20 s for that); past this, Ray is stopped anyway.
SHUTDOWN_TIMEOUT_S = 60


@dataclass
class RayConfig:
    """How the judge is spread over Ray."""

    replicas: int = option(1, "number of judge replicas, each with its own copy of the model")
    num_cpus_per_replica: float = option(1.0, "CPUs Ray reserves for each replica")
    num_gpus_per_replica: float = option(0.0, "GPUs Ray reserves for each replica (1 for a GPU judge)")
    max_ongoing_requests: int = option(64, "HTTP requests one replica handles at once (its batches form from these)")
    ray_address: str = option(
        "local", "`local` starts a private Ray cluster (shut down on exit); `auto` or an address joins a running one"
    )
    ray_num_cpus: int | None = option(None, "CPUs of the private local cluster; default: all of this machine's")

    def __post_init__(self):
        require(self.replicas > 0, "replicas must be positive")
        require(self.max_ongoing_requests > 0, "max_ongoing_requests must be positive")


@serve.deployment
@serve.ingress()
class JudgeReplica:
    """One replica: the judge, Ray Serve's batcher in front of it, and the HTTP API."""

    def __init__(self, judge_config: JudgeConfig, serving_config: ServingConfig):
        self._judge = load_judge(judge_config)
        self.identity = self._judge.identity
        self.can_compare = self._judge.can_compare
        self.replica = serve.get_replica_context().replica_id.unique_id
        self._serving_config = serving_config
        self._metrics = ServerMetrics()
        self._unanswered = 0
        self._model_turn = asyncio.Lock()
        self._metrics.watch_queue_depth(lambda: self._unanswered)
        for batched in (self._judge_batch, self._compare_batch):
            batched.set_max_batch_size(serving_config.max_batch_size)
            batched.set_batch_wait_timeout_s(serving_config.batch_timeout)

    @property
    def queue_depth(self) -> int:
        return self._unanswered

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return await self._each(self._judge_batch, items)

    async def compare(self, items: Sequence[ComparisonItem]) -> list[Verdict]:
        return await self._each(self._compare_batch, items)

    async def _each(self, batched, items: Sequence) -> list[Verdict]:
        self._unanswered += len(items)
        try:
            return list(await asyncio.gather(*(batched(item) for item in items)))
        finally:
            self._unanswered -= len(items)

    @serve.batch
    async def _judge_batch(self, items: list[JudgeItem]) -> list[Verdict]:
        return await self._run(self._judge.score_batch, items)

    @serve.batch
    async def _compare_batch(self, items: list[ComparisonItem]) -> list[Verdict]:
        return await self._run(self._judge.compare_batch, items)

    async def _run(self, score_batch, items: list) -> list[Verdict]:
        started = time.monotonic()
        # The model runs off the replica's event loop, on one thread at a time: judgements and comparisons
        # form separate @serve.batch batches, which must not run the model at once.
        async with self._model_turn:
            verdicts = await asyncio.to_thread(score_isolating_failures, score_batch, items)
        self._metrics.observe_batch(len(items), time.monotonic() - started)
        return verdicts

    def __serve_build_asgi_app__(self):
        return build_app(self, self._serving_config, self._metrics)


def judge_application(judge_config: JudgeConfig, serving_config: ServingConfig, ray_config: RayConfig):
    """The bound Ray Serve application (for `serve.run`)."""
    package_root = str(Path(__file__).resolve().parents[1])
    python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    return JudgeReplica.options(
        num_replicas=ray_config.replicas,
        max_ongoing_requests=ray_config.max_ongoing_requests,
        max_queued_requests=serving_config.max_queue_size,
        # Replicas import this package from the same checkout (no install needed on a local cluster).
        ray_actor_options={
            "num_cpus": ray_config.num_cpus_per_replica,
            "num_gpus": ray_config.num_gpus_per_replica,
            "runtime_env": {"env_vars": {"PYTHONPATH": python_path}},
        },
    ).bind(judge_config, serving_config)


def parse_arguments(argv: Sequence[str] | None = None):
    return parse_configs(
        "python -m serving.ray_serve", __doc__, (JudgeConfig, ServingConfig, HttpConfig, RayConfig), argv
    )


def main(argv: Sequence[str] | None = None) -> None:
    import ray

    judge_config, serving_config, http_config, ray_config = parse_arguments(argv)
    logging.basicConfig(level=http_config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    private_cluster = ray_config.ray_address == "local"
    ray.init(
        address=ray_config.ray_address,
        num_cpus=ray_config.ray_num_cpus if private_cluster else None,
        include_dashboard=False,
    )
    try:
        serve.start(http_options={"host": http_config.host, "port": http_config.port})
        serve.run(judge_application(judge_config, serving_config, ray_config), name=APP_NAME, route_prefix="/")
        print(
            f"judge server (Ray Serve, {ray_config.replicas} replicas) on http://{http_config.host}:{http_config.port} "
            f"(max_batch_size {serving_config.max_batch_size}, batch_timeout {serving_config.batch_timeout}s, "
            f"auth {'on' if serving_config.api_key else 'off'})",
            flush=True,
        )
        _wait_for_stop_signal()
    finally:
        _bounded(serve.shutdown if private_cluster else lambda: serve.delete(APP_NAME), SHUTDOWN_TIMEOUT_S)
        ray.shutdown()


def _bounded(action, timeout_s: float) -> None:
    """Run `action`, giving up after `timeout_s`: Serve's shutdown waits forever on a broken cluster."""
    worker = threading.Thread(target=action, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        log.warning("Ray Serve did not shut down within %.0f s; stopping Ray anyway", timeout_s)


def _wait_for_stop_signal() -> None:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()


if __name__ == "__main__":
    main()
