"""The HTTP API (FastAPI): /judge, /batch_judge, /compare, /batch_compare, /judge_group, /openrlhf/reward,
/health, /metrics, with optional bearer-key auth and request limits. The same app serves the standalone server and
each Ray Serve replica.

As vLLM's entrypoints do, the routes here stay thin: each hands its request to the handler of its concern, which
`build_app` puts on `app.state` (serving_judge, serving_compare, serving_groups, serving_openrlhf, serving_health;
what they share is serving_base)."""

from __future__ import annotations

import logging
import secrets
import time

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from .config import ServingConfig
from .metrics import ServerMetrics
from .schemas import (
    BatchCompareRequest,
    BatchCompareResponse,
    BatchJudgeRequest,
    BatchJudgeResponse,
    CompareRequest,
    CompareResponse,
    GroupJudgeRequest,
    GroupJudgeResponse,
    HealthResponse,
    JudgeRequest,
    JudgeResponse,
    OpenRLHFRewardRequest,
    OpenRLHFRewardResponse,
)
from .serving_base import COMPARING_JUDGES, JudgeService
from .serving_compare import CompareHandler
from .serving_groups import GroupHandler
from .serving_health import HealthHandler
from .serving_judge import JudgeHandler
from .serving_openrlhf import OPENRLHF_PATH, OpenRLHFHandler

log = logging.getLogger(__name__)

OPEN_PATHS = ("/health",)

router = APIRouter()


def build_app(service: JudgeService, config: ServingConfig, metrics: ServerMetrics, lifespan=None) -> FastAPI:
    app = FastAPI(
        title="Judge server",
        version="1.0",
        description="Scores (prompt, completion) pairs in [0, 1] with a judge model, for RL rewards, and "
        "compares two responses to one prompt (pairwise and scalar judges).",
        lifespan=lifespan,
    )
    app.add_middleware(BodySizeLimit, max_bytes=config.max_body_bytes)
    app.add_exception_handler(RequestValidationError, _refuse_invalid_request)
    app.middleware("http")(_authorize_and_measure(config.api_key, metrics))
    app.state.health = HealthHandler(service, config, metrics)
    app.state.judging = JudgeHandler(service, config, metrics)
    app.state.comparing = CompareHandler(service, config, metrics)
    app.state.groups = GroupHandler(service, config, metrics)
    app.state.openrlhf = OpenRLHFHandler(service, config, metrics, score_group=app.state.groups.all_pairs_rewards)
    app.include_router(router)
    return app


@router.post(
    "/judge",
    response_model=JudgeResponse,
    summary="Judge one completion (a failed judgement has score null and an error)",
)
async def judge(request: JudgeRequest, http_request: Request) -> JudgeResponse:
    return await http_request.app.state.judging.judge(request, http_request)


@router.post(
    "/batch_judge",
    response_model=BatchJudgeResponse,
    summary="Judge many completions; each response carries its request_id, in request order",
)
async def batch_judge(batch: BatchJudgeRequest, http_request: Request) -> BatchJudgeResponse:
    return await http_request.app.state.judging.batch_judge(batch, http_request)


@router.post(
    OPENRLHF_PATH,
    response_model=OpenRLHFRewardResponse,
    summary="OpenRLHF's remote reward protocol: {query, prompts, labels} -> {rewards, scores, extra_logs}; a "
    "sample whose prompt and response cannot be recovered, or that the judge cannot score, fails the request "
    "(422 / 500) naming it, never a made-up reward",
)
async def openrlhf_reward(body: OpenRLHFRewardRequest, http_request: Request) -> OpenRLHFRewardResponse:
    return await http_request.app.state.openrlhf.reward(body, http_request)


@router.post(
    "/compare",
    response_model=CompareResponse,
    summary="Compare two responses to one prompt: score = probability that response_a is better "
    f"(needs {COMPARING_JUDGES}; other judges answer 400)",
)
async def compare(request: CompareRequest, http_request: Request) -> CompareResponse:
    return await http_request.app.state.comparing.compare(request, http_request)


@router.post(
    "/batch_compare",
    response_model=BatchCompareResponse,
    summary="Compare many response pairs; each response carries its request_id, in request order "
    f"(needs {COMPARING_JUDGES})",
)
async def batch_compare(batch: BatchCompareRequest, http_request: Request) -> BatchCompareResponse:
    return await http_request.app.state.comparing.batch_compare(batch, http_request)


@router.post(
    "/judge_group",
    response_model=GroupJudgeResponse,
    summary="Reward each completion of a group (one prompt, N completions) by its mean win probability "
    f"against its siblings (needs {COMPARING_JUDGES}); a completion with failed comparisons says so",
)
async def judge_group(request: GroupJudgeRequest, http_request: Request) -> GroupJudgeResponse:
    return await http_request.app.state.groups.judge_group(request, http_request)


@router.get("/health", response_model=HealthResponse, summary="Model, judge kind and queue state (no auth)")
async def health(http_request: Request) -> HealthResponse:
    return http_request.app.state.health.health()


@router.head("/health", summary="Liveness probe for load balancers: 200 and no body (no auth)")
async def health_probe() -> Response:
    return Response()


@router.get("/metrics", summary="Prometheus metrics")
async def prometheus_metrics(http_request: Request) -> Response:
    return http_request.app.state.health.prometheus_metrics()


def _authorize_and_measure(api_key: str | None, metrics: ServerMetrics):
    """The HTTP middleware: 401 without the API key (except on OPEN_PATHS), and every answer measured."""

    async def authorize_and_measure(request: Request, call_next):
        started = time.perf_counter()
        if api_key and request.url.path not in OPEN_PATHS and not _has_key(request, api_key):
            response = JSONResponse(
                {"detail": "missing or wrong API key: send `Authorization: Bearer <key>`"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        else:
            response = await _answer_or_500(request, call_next)
        metrics.observe_request(request.url.path, response.status_code, time.perf_counter() - started)
        return response

    return authorize_and_measure


async def _answer_or_500(request: Request, call_next) -> Response:
    try:
        return await call_next(request)
    except Exception as err:  # a bug in a route must cost one request, never the server
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse({"detail": f"internal error: {type(err).__name__}: {err}"}, status_code=500)


def _has_key(request: Request, api_key: str) -> bool:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), api_key.encode())


async def _refuse_invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
    """422 with pydantic's reasons, without FastAPI's echo of each input: an input may hold NaN (which
    JSON cannot encode: a 500) or megabytes of text."""
    errors = [{key: value for key, value in error.items() if key != "input"} for error in err.errors()]
    for error in errors:
        if error["type"] == "model_attributes_type" and tuple(error["loc"]) == ("body",):
            error["msg"] = "the request body must be a JSON object (sent with Content-Type: application/json)"
    return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)


class BodySizeLimit:
    """ASGI middleware: a request body larger than `max_bytes` gets 413, whether or not it declares its size."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            response = JSONResponse({"detail": self._too_large(declared.decode())}, status_code=413)
            return await response(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise HTTPException(413, self._too_large(f"more than {received}"))
            return message

        await self.app(scope, limited_receive, send)

    def _too_large(self, size: str) -> str:
        return f"request body of {size} bytes; the limit is {self.max_bytes} (--max-body-bytes)"
