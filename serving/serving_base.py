"""What every route handler shares: the judge service they call (`JudgeService`), the request limits, the
client-disconnect watch, and `ServingHandler.answer`, which turns judge or compare requests into responses. The
handlers, one module per concern: serving_judge (/judge, /batch_judge), serving_compare (/compare,
/batch_compare), serving_groups (/judge_group), serving_openrlhf (/openrlhf/reward); app.py wires the routes."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from fastapi import HTTPException, Request

from judge_core.protocol import content

from .batching import BatcherStopped, QueueFull
from .config import ServingConfig
from .judges import ComparisonItem, JudgeIdentity, JudgeItem, Verdict
from .metrics import ServerMetrics
from .schemas import CompareRequest, CompareResponse, GroupJudgeRequest, JudgeRequest, VerdictResponse

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


class ServingHandler:
    """The base of the route handlers: the service, the server's limits and its metrics."""

    def __init__(self, service: JudgeService, config: ServingConfig, metrics: ServerMetrics):
        self.service, self.config, self.metrics = service, config, metrics

    async def answer(
        self,
        http_request: Request,
        requests: Sequence[Request_],
        run: Callable[[list], Awaitable[list[Verdict]]],
        response_type: type[Response_],
    ) -> list[Response_]:
        """One response per request; a request over an item-level limit gets its error, never a verdict."""
        started = time.perf_counter()
        request_ids = [r.request_id if r.request_id is not None else uuid.uuid4().hex for r in requests]
        refusals = [text_size_error(r, self.config.max_text_chars) for r in requests]
        prompts, dropped = zip(*(self.readable_prompt(r.conversation()) for r in requests), strict=True)
        items = [dataclasses.replace(r.item(), prompt=prompt) for r, prompt in zip(requests, prompts, strict=True)]
        accepted = [item for item, refusal in zip(items, refusals, strict=True) if refusal is None]
        answered = await judged_unless_client_leaves(http_request, run(accepted)) if accepted else []
        in_order = iter(answered)
        verdicts = [Verdict.failed(refusal) if refusal else next(in_order) for refusal in refusals]
        self.metrics.count_verdicts(verdicts, comparisons=response_type is CompareResponse)
        common = {"latency": time.perf_counter() - started, **self.judge_metadata()}
        return [
            response_type.of(v, request_id, {**common, **dropped_metadata(images)})
            for v, request_id, images in zip(verdicts, request_ids, dropped, strict=True)
        ]

    def readable_prompt(self, prompt):
        """The prompt as the judge reads it, and how many images it lost: all of them for a judge that reads none
        (requests carrying images reach here only with --drop-images: check_content refuses them otherwise)."""
        if self.service.identity.reads_images or isinstance(prompt, str):
            return prompt, 0
        messages, dropped = content.without_images(prompt)
        return (messages, dropped) if dropped else (prompt, 0)

    def judge_metadata(self) -> dict[str, str]:
        """Which judge answered, as each response's metadata says."""
        return {"judge": self.service.identity.kind, "model_id": self.service.identity.model_id}

    def check_content(self, requests: Sequence, field: str = "") -> None:
        """What every judging route checks of its requests' content: their images, then their rubrics."""
        for index, request in enumerate(requests):
            self._check_images(request, f"{field}[{index}]." if field else "")
        self._check_rubrics(requests, field)

    def _check_images(self, request, name: str) -> None:
        """413 past --max-images or --max-image-bytes; 422 for an image a judge that reads none would not see."""
        prompt = request.conversation()
        images = [] if isinstance(prompt, str) else list(content.image_urls(prompt))
        limit = self.config.max_images
        if len(images) > limit:
            raise HTTPException(413, f"{name}prompt has {len(images)} images; the limit is {limit} (--max-images)")
        for where, url in images:
            size, limit = len(content.image_bytes(url, where)), self.config.max_image_bytes
            if size > limit:
                raise HTTPException(
                    413, f"{name}prompt{where} is an image of {size} bytes; the limit is {limit} (--max-image-bytes)"
                )
        if images and not (self.service.identity.reads_images or self.config.drop_images):
            raise HTTPException(
                422,
                f"{name}prompt{images[0][0]}: this judge reads no images (serve it with --drop-images to judge the "
                "text alone)",
            )

    def _check_rubrics(self, requests: Sequence, field: str = "") -> None:
        """422 naming the field of each request whose rubric the judge needs and lacks, or cannot read."""
        reads = self.service.identity.reads_rubric
        problems = [
            f"{field}[{i}].rubric" if field else "rubric"
            for i, request in enumerate(requests)
            if (request.rubric is None) == reads
        ]
        if problems:
            why = (
                "this judge's template reads a rubric ({rubric}): send one"
                if reads
                else "this judge has no place for a rubric (serve a --judge-template with {rubric}): leave it out"
            )
            raise HTTPException(422, f"{', '.join(problems[:8])}: {why}")

    def check_batch_size(self, count: int) -> None:
        limit = self.config.max_batch_requests
        if count > limit:
            raise HTTPException(413, f"{count} requests in one batch; the limit is {limit} (--max-batch-requests)")

    def check_batch(self, requests: Sequence[Request_]) -> None:
        self.check_batch_size(len(requests))
        _check_unique_ids(requests)

    def check_can_compare(self, path: str) -> None:
        if not self.service.can_compare:
            kind = self.service.identity.kind
            raise HTTPException(400, f"{path} needs {COMPARING_JUDGES}; this server hosts a {kind} judge")


def dropped_metadata(images: int) -> dict[str, int]:
    return {"images_dropped": images} if images else {}


def text_size_error(request: JudgeRequest | CompareRequest | GroupJudgeRequest, max_chars: int) -> str | None:
    for name, text in request.texts().items():
        if len(text) > max_chars:
            return f"{name} has {len(text)} characters; the limit is {max_chars} (--max-text-chars)"
    return None


async def judged_unless_client_leaves(request: Request, judging: Awaitable[list[Verdict]]) -> list[Verdict]:
    """The verdicts; 503 when the judge's queue is full or stopping; CLIENT_LEFT when the client leaves first."""
    try:
        return await _unless_client_leaves(request, judging)
    except (QueueFull, BatcherStopped) as err:
        raise HTTPException(503, str(err)) from err


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
