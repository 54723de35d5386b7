"""OpenRLHF's remote reward protocol (POST /openrlhf/reward): {query, prompts, labels} -> {rewards, scores,
extra_logs}. Each sample is judged alone, or, with --openrlhf-group-size, rewarded within its prompt's group,
gathered across requests (group_rewards.GroupGatherer). A sample whose prompt and response cannot be recovered,
or that the judge cannot score, fails the request (422 / 500) naming it, never a made-up reward."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from fastapi import HTTPException, Request

from judge_core.protocol.judge_api import prompt_key

from .batching import BatcherStopped, QueueFull
from .config import ServingConfig
from .group_rewards import GroupGatherer
from .metrics import ServerMetrics
from .schemas import JudgeRequest, JudgeResponse, OpenRLHFRewardRequest, OpenRLHFRewardResponse
from .serving_base import COMPARING_JUDGES, JudgeService, ServingHandler

log = logging.getLogger(__name__)

OPENRLHF_PATH = (
    "/openrlhf/reward"  # the URL to give OpenRLHF's --reward.remote_url: http://judge-host:8888/openrlhf/reward
)


class OpenRLHFHandler(ServingHandler):
    def __init__(self, service: JudgeService, config: ServingConfig, metrics: ServerMetrics, score_group):
        """`score_group(prompt, completions)`: awaitable of a gathered group's CompletionRewards."""
        super().__init__(service, config, metrics)
        self._gatherer = None
        if config.openrlhf_group_size:
            if not service.can_compare:
                raise ValueError(
                    f"--openrlhf-group-size needs {COMPARING_JUDGES}; this server hosts a {service.identity.kind} judge"
                )
            self._gatherer = GroupGatherer(config.openrlhf_group_size, config.openrlhf_group_window_s, score_group)

    async def reward(self, body: OpenRLHFRewardRequest, http_request: Request) -> OpenRLHFRewardResponse:
        self.check_batch_size(len(body.query))
        requests = body.judge_requests()
        refusals = [request for request in requests if isinstance(request, str)]
        if refusals:
            log.warning("%s refused: %s", OPENRLHF_PATH, "; ".join(refusals))
            raise HTTPException(422, refusals)
        self.check_content(requests, "labels")
        if self._gatherer is not None:
            return await self._gathered_rewards(requests)
        return await self._judged_rewards(requests, http_request)

    async def _judged_rewards(self, requests: Sequence[JudgeRequest], http_request: Request) -> OpenRLHFRewardResponse:
        """Each sample's reward from the judge, alone."""
        responses = await self.answer(http_request, requests, self.service.judge, JudgeResponse)
        failures = [f"sample {i}: {r.error}" for i, r in enumerate(responses) if r.score is None]
        if failures:
            log.warning("%s: the judge could not score: %s", OPENRLHF_PATH, "; ".join(failures))
            raise HTTPException(500, failures)
        scores = [response.score for response in responses]
        return OpenRLHFRewardResponse(rewards=scores, scores=scores)

    async def _gathered_rewards(self, requests: Sequence[JudgeRequest]) -> OpenRLHFRewardResponse:
        """Each sample's reward from its prompt's group (--openrlhf-group-size), gathered across requests."""
        items = [request.item() for request in requests]
        outcomes = await asyncio.gather(
            *(self._gatherer.reward(prompt_key(item.prompt), item.prompt, item.completion) for item in items),
            return_exceptions=True,
        )
        _refuse_failed_groups(outcomes)
        scores = [reward.score for reward, _ in outcomes]
        extra_logs = {
            "group_size": [float(size) for _, size in outcomes],
            "comparisons": [float(reward.comparisons) for reward, _ in outcomes],
            "failed_comparisons": [float(reward.failed) for reward, _ in outcomes],
        }
        return OpenRLHFRewardResponse(rewards=scores, scores=scores, extra_logs=extra_logs)


def _refuse_failed_groups(outcomes: list) -> None:
    """503 when the judge could not take a group's comparisons; 500 naming each sample without a reward."""
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
