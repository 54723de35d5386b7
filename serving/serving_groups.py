"""Group rewards (POST /judge_group): each completion of a group (one prompt, N completions) rewarded by its
mean win probability against its siblings. The schedules and the reward arithmetic are group_rewards.py's; this
module checks the request, runs its comparisons on the judge and answers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from fastapi import HTTPException, Request

from .group_rewards import CompletionReward, group_rewards, pair_schedule, position_consistency
from .judges import ComparisonItem, Verdict
from .schemas import GroupJudgeRequest, GroupJudgeResponse, GroupReward
from .serving_base import ServingHandler, dropped_metadata, judged_unless_client_leaves, text_size_error


class GroupHandler(ServingHandler):
    async def judge_group(self, request: GroupJudgeRequest, http_request: Request) -> GroupJudgeResponse:
        pairs = self._pairs_to_compare(request)
        started = time.perf_counter()
        prompt, dropped = self.readable_prompt(request.conversation())
        judging = self.compare_group(prompt, request.completions, pairs, request.rubric)
        verdicts = await judged_unless_client_leaves(http_request, judging)
        rewards = group_rewards(len(request.completions), pairs, verdicts)
        return GroupJudgeResponse(
            request_id=request.request_id if request.request_id is not None else uuid.uuid4().hex,
            rewards=[GroupReward(**vars(reward)) for reward in rewards],
            schedule=request.schedule,
            comparisons_run=len(pairs),
            metadata={
                "latency": time.perf_counter() - started,
                **self.judge_metadata(),
                "position_consistency": position_consistency(verdicts),
                **dropped_metadata(dropped),
            },
        )

    async def compare_group(
        self, prompt, completions: Sequence[str], pairs: Sequence[tuple[int, int]], rubric: str | None = None
    ) -> list[Verdict]:
        """The verdicts of `pairs` (i, j) of the completions: the probability that completion i is better."""
        items = [ComparisonItem(prompt, completions[i], completions[j], rubric) for i, j in pairs]
        verdicts = await self.service.compare(items)
        self.metrics.count_verdicts(verdicts, comparisons=True)
        return verdicts

    async def all_pairs_rewards(self, prompt, completions: Sequence[str]) -> list[CompletionReward]:
        """Each completion's reward from a comparison with every sibling (the OpenRLHF route's gathered groups)."""
        pairs = pair_schedule(len(completions), "all_pairs")
        return group_rewards(len(completions), pairs, await self.compare_group(prompt, completions, pairs))

    def _pairs_to_compare(self, request: GroupJudgeRequest) -> list[tuple[int, int]]:
        """The request's schedule of comparisons, once it is within the server's limits (otherwise 400, 413, 422)."""
        self.check_can_compare("/judge_group")
        self.check_content([request])
        size, limit = len(request.completions), self.config.max_group_size
        if size > limit:
            raise HTTPException(413, f"{size} completions in one group; the limit is {limit}")
        refusal = text_size_error(request, self.config.max_text_chars)
        if refusal is not None:
            raise HTTPException(413, refusal)
        try:
            return pair_schedule(size, request.schedule, request.k, request.seed)
        except ValueError as err:
            raise HTTPException(422, str(err)) from err
