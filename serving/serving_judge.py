"""Judging (POST /judge, /batch_judge): each completion scored in [0, 1] by the judge."""

from __future__ import annotations

from fastapi import Request

from .schemas import BatchJudgeRequest, BatchJudgeResponse, JudgeRequest, JudgeResponse
from .serving_base import ServingHandler


class JudgeHandler(ServingHandler):
    async def judge(self, request: JudgeRequest, http_request: Request) -> JudgeResponse:
        self.check_content([request])
        return (await self.answer(http_request, [request], self.service.judge, JudgeResponse))[0]

    async def batch_judge(self, batch: BatchJudgeRequest, http_request: Request) -> BatchJudgeResponse:
        self.check_batch(batch.requests)
        self.check_content(batch.requests, "requests")
        return BatchJudgeResponse(
            responses=await self.answer(http_request, batch.requests, self.service.judge, JudgeResponse)
        )
