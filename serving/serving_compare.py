"""Comparing (POST /compare, /batch_compare): two responses to one prompt, score = the probability that
response_a is better; a judge that cannot compare answers 400."""

from __future__ import annotations

from fastapi import Request

from .schemas import BatchCompareRequest, BatchCompareResponse, CompareRequest, CompareResponse
from .serving_base import ServingHandler


class CompareHandler(ServingHandler):
    async def compare(self, request: CompareRequest, http_request: Request) -> CompareResponse:
        self.check_can_compare("/compare")
        self.check_content([request])
        return (await self.answer(http_request, [request], self.service.compare, CompareResponse))[0]

    async def batch_compare(self, batch: BatchCompareRequest, http_request: Request) -> BatchCompareResponse:
        self.check_can_compare("/batch_compare")
        self.check_batch(batch.requests)
        self.check_content(batch.requests, "requests")
        return BatchCompareResponse(
            responses=await self.answer(http_request, batch.requests, self.service.compare, CompareResponse)
        )
