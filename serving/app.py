"""The HTTP API (FastAPI): /judge, /batch_judge, /compare, /batch_compare, /judge_group, /health, /metrics, with
optional bearer-key auth and request limits. The same app serves the standalone server and each Ray Serve replica."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from .batching import BatcherStopped, QueueFull
from .config import ServingConfig
from .group_rewards import GroupGatherer, group_rewards, pair_schedule, position_consistency
from .judges import ComparisonItem, JudgeIdentity, JudgeItem, Verdict
from .judges.base import prompt_key
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
    GroupReward,
    HealthResponse,
    JudgeRequest,
    JudgeResponse,
    OpenRLHFRewardRequest,
    OpenRLHFRewardResponse,
    VerdictResponse,
)

log = logging.getLogger(__name__)

OPEN_PATHS = ("/health",)
OPENRLHF_PATH = (
    "/openrlhf/reward"  # the URL to give OpenRLHF's --reward.remote_url: http://judge-host:8888/openrlhf/reward
)
CLIENT_LEFT = 499  # nginx's status for a request whose client disconnected first; only the metrics see it
COMPARING_JUDGES = "a pairwise or scalar judge"

Request_ = TypeVar("Request_", JudgeRequest, CompareRequest)
Response_ = TypeVar("Response_", bound=VerdictResponse)


class JudgeService(Protocol):
    """What the routes need from whatever runs the judge (the local batcher, or a Ray Serve replica)."""

    identity: JudgeIdentity
    replica: str  # which process answers: host:pid, or the Ray Serve replica id
    can_compare: bool  # whether the judge answers /compare

    @property
    def queue_depth(self) -> int: ...

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """One verdict per item, in order."""

    async def compare(self, items: Sequence[ComparisonItem]) -> list[Verdict]:
        """One verdict per comparison, in order (score: the probability that response_a is better)."""


def build_app(service: JudgeService, config: ServingConfig, metrics: ServerMetrics, lifespan=None) -> FastAPI:
    app = FastAPI(
        title="Judge server",
        version="1.0",
        description="Scores (prompt, completion) pairs in [0, 1] with a judge model, for RL rewards, and "
        "compares two responses to one prompt (pairwise and scalar judges).",
        lifespan=lifespan,
    )
    started_at = time.monotonic()
    app.add_middleware(BodySizeLimit, max_bytes=config.max_body_bytes)
    app.add_exception_handler(RequestValidationError, _refuse_invalid_request)

    @app.middleware("http")
    async def authorize_and_measure(request: Request, call_next):
        started = time.perf_counter()
        if config.api_key and request.url.path not in OPEN_PATHS and not _has_key(request, config.api_key):
            response = JSONResponse(
                {"detail": "missing or wrong API key: send `Authorization: Bearer <key>`"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        else:
            response = await _answer_or_500(request, call_next)
        metrics.observe_request(request.url.path, response.status_code, time.perf_counter() - started)
        return response

    async def answer(
        http_request: Request,
        requests: Sequence[Request_],
        run: Callable[[list], Awaitable[list[Verdict]]],
        response_type: type[Response_],
    ) -> list[Response_]:
        """One response per request; a request over an item-level limit gets its error, never a verdict."""
        started = time.perf_counter()
        request_ids = [r.request_id if r.request_id is not None else uuid.uuid4().hex for r in requests]
        refusals = [_text_size_error(r, config.max_text_chars) for r in requests]
        accepted = [r.item() for r, refusal in zip(requests, refusals, strict=True) if refusal is None]
        try:
            answered = await _unless_client_leaves(http_request, run(accepted)) if accepted else []
        except (QueueFull, BatcherStopped) as err:
            raise HTTPException(503, str(err)) from err
        in_order = iter(answered)
        verdicts = [Verdict.failed(refusal) if refusal else next(in_order) for refusal in refusals]
        metrics.count_verdicts(verdicts, comparisons=response_type is CompareResponse)
        common = {
            "latency": time.perf_counter() - started,
            "judge": service.identity.kind,
            "model_id": service.identity.model_id,
        }
        return [response_type.of(v, request_id, common) for v, request_id in zip(verdicts, request_ids, strict=True)]

    def check_batch_size(count: int) -> None:
        if count > config.max_batch_requests:
            raise HTTPException(
                413, f"{count} requests in one batch; the limit is {config.max_batch_requests} (--max-batch-requests)"
            )

    def check_batch(requests: Sequence[Request_]) -> None:
        check_batch_size(len(requests))
        _check_unique_ids(requests)

    def check_can_compare(path: str) -> None:
        if not service.can_compare:
            raise HTTPException(
                400, f"{path} needs {COMPARING_JUDGES}; this server hosts a {service.identity.kind} judge"
            )

    async def compare_group(prompt, completions: Sequence[str], pairs: Sequence[tuple[int, int]]) -> list[Verdict]:
        verdicts = await service.compare([ComparisonItem(prompt, completions[i], completions[j]) for i, j in pairs])
        metrics.count_verdicts(verdicts, comparisons=True)
        return verdicts

    async def all_pairs_rewards(prompt, completions: Sequence[str]):
        pairs = pair_schedule(len(completions), "all_pairs")
        return group_rewards(len(completions), pairs, await compare_group(prompt, completions, pairs))

    gatherer = None
    if config.openrlhf_group_size:
        if not service.can_compare:
            raise ValueError(
                f"--openrlhf-group-size needs {COMPARING_JUDGES}; this server hosts a {service.identity.kind} judge"
            )
        gatherer = GroupGatherer(config.openrlhf_group_size, config.openrlhf_group_window_s, all_pairs_rewards)

    async def gathered_openrlhf_rewards(requests: Sequence[JudgeRequest]) -> OpenRLHFRewardResponse:
        """Each sample's reward from its prompt's group (--openrlhf-group-size), gathered across requests."""
        items = [request.item() for request in requests]
        outcomes = await asyncio.gather(
            *(gatherer.reward(prompt_key(item.prompt), item.prompt, item.completion) for item in items),
            return_exceptions=True,
        )
        unavailable = [o for o in outcomes if isinstance(o, (QueueFull, BatcherStopped))]
        if unavailable:
            raise HTTPException(503, str(unavailable[0]))
        failures = [
            f"sample {i}: {o if isinstance(o, BaseException) else o[0].error}"
            for i, o in enumerate(outcomes)
            if isinstance(o, BaseException) or o[0].score is None
        ]
        if failures:
            log.warning("%s: no group reward: %s", OPENRLHF_PATH, "; ".join(failures))
            raise HTTPException(500, failures)
        scores = [reward.score for reward, _ in outcomes]
        extra_logs = {
            "group_size": [float(size) for _, size in outcomes],
            "comparisons": [float(reward.comparisons) for reward, _ in outcomes],
            "failed_comparisons": [float(reward.failed) for reward, _ in outcomes],
        }
        return OpenRLHFRewardResponse(rewards=scores, scores=scores, extra_logs=extra_logs)

    @app.post(
        "/judge",
        response_model=JudgeResponse,
        summary="Judge one completion (a failed judgement has score null and an error)",
    )
    async def judge(request: JudgeRequest, http_request: Request) -> JudgeResponse:
        return (await answer(http_request, [request], service.judge, JudgeResponse))[0]

    @app.post(
        "/batch_judge",
        response_model=BatchJudgeResponse,
        summary="Judge many completions; each response carries its request_id, in request order",
    )
    async def batch_judge(batch: BatchJudgeRequest, http_request: Request) -> BatchJudgeResponse:
        check_batch(batch.requests)
        return BatchJudgeResponse(responses=await answer(http_request, batch.requests, service.judge, JudgeResponse))

    @app.post(
        OPENRLHF_PATH,
        response_model=OpenRLHFRewardResponse,
        summary="OpenRLHF's remote reward protocol: {query, prompts, labels} -> {rewards, scores, extra_logs}; a "
        "sample whose prompt and response cannot be recovered, or that the judge cannot score, fails the request "
        "(422 / 500) naming it, never a made-up reward",
    )
    async def openrlhf_reward(body: OpenRLHFRewardRequest, http_request: Request) -> OpenRLHFRewardResponse:
        check_batch_size(len(body.query))
        requests = body.judge_requests()
        refusals = [request for request in requests if isinstance(request, str)]
        if refusals:
            log.warning("%s refused: %s", OPENRLHF_PATH, "; ".join(refusals))
            raise HTTPException(422, refusals)
        if gatherer is not None:
            return await gathered_openrlhf_rewards(requests)
        responses = await answer(http_request, requests, service.judge, JudgeResponse)
        failures = [f"sample {i}: {r.error}" for i, r in enumerate(responses) if r.score is None]
        if failures:
            log.warning("%s: the judge could not score: %s", OPENRLHF_PATH, "; ".join(failures))
            raise HTTPException(500, failures)
        scores = [response.score for response in responses]
        return OpenRLHFRewardResponse(rewards=scores, scores=scores)

    @app.post(
        "/compare",
        response_model=CompareResponse,
        summary="Compare two responses to one prompt: score = probability that response_a is better "
        f"(needs {COMPARING_JUDGES}; other judges answer 400)",
    )
    async def compare(request: CompareRequest, http_request: Request) -> CompareResponse:
        check_can_compare("/compare")
        return (await answer(http_request, [request], service.compare, CompareResponse))[0]

    @app.post(
        "/batch_compare",
        response_model=BatchCompareResponse,
        summary="Compare many response pairs; each response carries its request_id, in request order "
        f"(needs {COMPARING_JUDGES})",
    )
    async def batch_compare(batch: BatchCompareRequest, http_request: Request) -> BatchCompareResponse:
        check_can_compare("/batch_compare")
        check_batch(batch.requests)
        return BatchCompareResponse(
            responses=await answer(http_request, batch.requests, service.compare, CompareResponse)
        )

    @app.post(
        "/judge_group",
        response_model=GroupJudgeResponse,
        summary="Reward each completion of a group (one prompt, N completions) by its mean win probability "
        f"against its siblings (needs {COMPARING_JUDGES}); a completion with failed comparisons says so",
    )
    async def judge_group(request: GroupJudgeRequest, http_request: Request) -> GroupJudgeResponse:
        check_can_compare("/judge_group")
        size = len(request.completions)
        if size > config.max_group_size:
            raise HTTPException(413, f"{size} completions in one group; the limit is {config.max_group_size}")
        refusal = _text_size_error(request, config.max_text_chars)
        if refusal is not None:
            raise HTTPException(413, refusal)
        try:
            pairs = pair_schedule(size, request.schedule, request.k, request.seed)
        except ValueError as err:
            raise HTTPException(422, str(err)) from err
        started = time.perf_counter()
        judging = compare_group(request.conversation(), request.completions, pairs)
        try:
            verdicts = await _unless_client_leaves(http_request, judging)
        except (QueueFull, BatcherStopped) as err:
            raise HTTPException(503, str(err)) from err
        rewards = group_rewards(size, pairs, verdicts)
        return GroupJudgeResponse(
            request_id=request.request_id if request.request_id is not None else uuid.uuid4().hex,
            rewards=[GroupReward(**vars(reward)) for reward in rewards],
            schedule=request.schedule,
            comparisons_run=len(pairs),
            metadata={
                "latency": time.perf_counter() - started,
                "judge": service.identity.kind,
                "model_id": service.identity.model_id,
                "position_consistency": position_consistency(verdicts),
            },
        )

    @app.get("/health", response_model=HealthResponse, summary="Model, judge kind and queue state (no auth)")
    async def health() -> HealthResponse:
        identity = service.identity
        return HealthResponse(
            status="ok",
            model_loaded=True,
            replica=service.replica,
            judge_kind=identity.kind,
            backend=identity.backend,
            backend_reason=identity.backend_reason,
            model_id=identity.model_id,
            model_version=identity.model_version,
            scoring=identity.scoring,
            tokenization=identity.tokenization,
            reads_answer=identity.reads_answer,
            queue_depth=service.queue_depth,
            max_batch_size=config.max_batch_size,
            batch_timeout=config.batch_timeout,
            batches_run=metrics.batches_run,
            judgements_answered=metrics.judgements_answered,
            uptime_s=time.monotonic() - started_at,
        )

    @app.head("/health", summary="Liveness probe for load balancers: 200 and no body (no auth)")
    async def health_probe() -> Response:
        return Response()

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=metrics.content_type)

    return app


async def _answer_or_500(request: Request, call_next) -> Response:
    try:
        return await call_next(request)
    except Exception as err:  # a bug in a route must cost one request, never the server
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse({"detail": f"internal error: {type(err).__name__}: {err}"}, status_code=500)


def _has_key(request: Request, api_key: str) -> bool:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), api_key.encode())


def _text_size_error(request: JudgeRequest | CompareRequest | GroupJudgeRequest, max_chars: int) -> str | None:
    for name, text in request.texts().items():
        if len(text) > max_chars:
            return f"{name} has {len(text)} characters; the limit is {max_chars} (--max-text-chars)"
    return None


async def _unless_client_leaves(request: Request, judging: Awaitable[list[Verdict]]) -> list[Verdict]:
    """The verdicts; if the client disconnects first, its judgements are cancelled (the batcher skips
    them and frees their place in the queue) and the request ends with CLIENT_LEFT."""
    judged = asyncio.ensure_future(judging)
    left = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({judged, left}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        left.cancel()
        judged.cancel()  # nothing when it has finished
    if judged not in done:
        raise HTTPException(CLIENT_LEFT, "the client disconnected before its answer")
    return judged.result()


async def _disconnected(request: Request) -> None:
    """Returns once the client is gone; the body has been read, so nothing else can arrive."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _refuse_invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
    """422 with pydantic's reasons, without FastAPI's echo of each input: an input may hold NaN (which
    JSON cannot encode: a 500) or megabytes of text."""
    errors = [{key: value for key, value in error.items() if key != "input"} for error in err.errors()]
    for error in errors:
        if error["type"] == "model_attributes_type" and tuple(error["loc"]) == ("body",):
            error["msg"] = "the request body must be a JSON object (sent with Content-Type: application/json)"
    return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)


def _check_unique_ids(requests: Sequence[JudgeRequest | CompareRequest]) -> None:
    seen: set[str] = set()
    for index, request in enumerate(requests):
        if request.request_id is None:
            continue
        if request.request_id in seen:
            raise HTTPException(
                422,
                f"requests[{index}].request_id {request.request_id!r} repeats an earlier one; "
                "request ids must be unique within a batch",
            )
        seen.add(request.request_id)


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
