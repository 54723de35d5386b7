"""The standalone judge server: `python -m serving --model PATH` takes its port, loads the judge, then serves the
HTTP API with uvicorn; a dynamic batcher feeds the model from one worker thread."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Sequence

from judge_core.settings import parse_configs
from judge_models.config import JudgeConfig

from .app import build_app
from .batching import DynamicBatcher
from .config import HttpConfig, ServingConfig
from .judges import BackendUnavailable, ComparisonItem, Judge, JudgeItem, Verdict, load_judge
from .metrics import ServerMetrics
from .process_tree import stop_descendants, stop_on_signals

log = logging.getLogger(__name__)


class LocalJudgeService:
    """The judge of this process behind the dynamic batcher."""

    def __init__(self, judge: Judge, config: ServingConfig, metrics: ServerMetrics):
        self.identity = judge.identity
        self.can_compare = judge.can_compare
        self.replica = f"{socket.gethostname()}:{os.getpid()}"
        self._batcher = DynamicBatcher(
            judge.score_batch,
            config.max_batch_size,
            config.batch_timeout,
            config.max_queue_size,
            on_batch=metrics.observe_batch,
            compare_batch=judge.compare_batch,
            group_by_prompt=judge.computes_shared_prompts_once,
        )
        metrics.watch_queue_depth(lambda: self._batcher.queue_depth)

    @property
    def queue_depth(self) -> int:
        return self._batcher.queue_depth

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return await self._batcher.submit(items)

    async def compare(self, items: Sequence[ComparisonItem]) -> list[Verdict]:
        return await self._batcher.submit(items)

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        self._batcher.start()
        yield
        await self._batcher.stop()


def build_local_app(judge: Judge, config: ServingConfig):
    metrics = ServerMetrics()
    service = LocalJudgeService(judge, config, metrics)
    return build_app(service, config, metrics, lifespan=service.lifespan)


def parse_arguments(argv: Sequence[str] | None = None) -> tuple[JudgeConfig, ServingConfig, HttpConfig]:
    return parse_configs("python -m serving", __doc__, (JudgeConfig, ServingConfig, HttpConfig), argv)


def load_or_exit(config: JudgeConfig) -> Judge:
    """The judge, or an exit with the reason it cannot be loaded (no traceback for a wrong flag or path)."""
    try:
        return load_judge(config)
    except (BackendUnavailable, ValueError, OSError) as err:
        raise SystemExit(f"cannot load the judge: {err}") from err


def main(argv: Sequence[str] | None = None) -> None:
    judge_config, serving_config, http_config = parse_arguments(argv)
    logging.basicConfig(level=http_config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A stop at any moment (loading, an engine compiling, serving, draining) takes the engine's processes along.
    stop_on_signals()
    try:
        serve(judge_config, serving_config, http_config)
    finally:
        stop_descendants()


def bind_or_exit(http_config: HttpConfig) -> socket.socket:
    """The server's socket, bound before the judge loads: a port in use stops the start at once, not after minutes
    of loading, and nothing the engine starts meanwhile can take the port."""
    family = socket.AF_INET6 if ":" in http_config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((http_config.host, http_config.port))
    except OSError as err:
        sock.close()
        raise SystemExit(f"cannot listen on {http_config.host}:{http_config.port} (--host, --port): {err}") from err
    return sock


def serve(judge_config: JudgeConfig, serving_config: ServingConfig, http_config: HttpConfig) -> None:
    import uvicorn

    sock = bind_or_exit(http_config)
    judge = load_or_exit(judge_config)
    app = build_local_app(judge, serving_config)
    identity = judge.identity
    print(
        f"judge server: {identity.kind} judge {identity.model_id} ({identity.backend}: {identity.backend_reason}; "
        f"version {identity.model_version}) on http://{http_config.host}:{http_config.port} "
        f"(max_batch_size {serving_config.max_batch_size}, batch_timeout {serving_config.batch_timeout}s, "
        f"auth {'on' if serving_config.api_key else 'off'})",
        flush=True,
    )
    # uvicorn answers the requests it holds on SIGTERM or SIGINT, then re-raises the signal to the handler found
    # at start, stop_on_signals's: it stops the engine's processes and exits (0 for SIGTERM, as Ray Serve's server).
    config = uvicorn.Config(app, host=http_config.host, port=http_config.port, log_level=http_config.log_level)
    uvicorn.Server(config).run(sockets=[sock])
