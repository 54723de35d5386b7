"""Group-relative rewards from a judge that compares: each completion of a GRPO group rewarded by how it fares
against its siblings (POST /judge_group).

A comparison (i, j) is one /compare verdict: p = the probability that completion i is better than j. Completion
i earns p and j earns 1 - p; a completion's reward is its mean over the comparisons that answered. The pairwise
generative judge judges every comparison in both orders (A/B swapped) and averages them, so a position
preference cancels, and a scalar judge's comparison, sigmoid(r_i - r_j), has no order: one comparison per pair
is enough for both. Schedules and their cost, for N completions:
- all_pairs: every pair once, N(N-1)/2 comparisons (N-1 per completion): 28 at N = 8, 120 at N = 16;
- k_random: each completion meets k siblings drawn at random (seeded), the pairs drawn by two completions
  counted once: between N*k/2 and N*k comparisons, at least k per completion.
A failed comparison counts against neither completion: it is reported in both completions' `failed` and `error`,
and their rewards come from the comparisons that answered; a completion none of whose comparisons answered has
no reward (score null), never a made-up 0.5.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass

from judge_core.protocol import groups

from .judges.base import ORDERS_AGREE, Verdict

SCHEDULES = ("all_pairs", "k_random")


@dataclass(frozen=True)
class CompletionReward:
    score: float | None  # mean win probability over the comparisons that answered; None when none did
    comparisons: int  # comparisons of this completion that answered
    failed: int  # comparisons of this completion that failed
    error: str | None  # what failed, when anything did
    # answered comparisons of this completion whose two orders chose the same response; None: no verdict says
    orders_agreed: int | None = None


def pair_schedule(size: int, schedule: str, k: int | None = None, seed: int = 0) -> list[tuple[int, int]]:
    """The pairs (i, j), i < j, of a group of `size` completions that the schedule compares."""
    if schedule == "all_pairs":
        return [(i, j) for i in range(size) for j in range(i + 1, size)]
    if schedule != "k_random":
        raise ValueError(f"unknown schedule {schedule!r}; one of {SCHEDULES}")
    if k is None or not 1 <= k < size:
        raise ValueError(f"k_random needs k between 1 and the group size - 1 ({size - 1}); got {k}")
    rng = random.Random(seed)
    pairs: set[tuple[int, int]] = set()
    for i in range(size):
        for j in rng.sample([j for j in range(size) if j != i], k):
            pairs.add((min(i, j), max(i, j)))
    return sorted(pairs)


def group_rewards(size: int, pairs: Sequence[tuple[int, int]], verdicts: Sequence[Verdict]) -> list[CompletionReward]:
    """Each completion's reward from the verdicts of `pairs` (score: P(first of the pair is better))."""
    wins, answered = [0.0] * size, [0] * size
    agreed: list[int | None] = [None] * size
    failures: list[list[str]] = [[] for _ in range(size)]
    for (i, j), verdict in zip(pairs, verdicts, strict=True):
        if verdict.score is None:
            for own, other in ((i, j), (j, i)):
                failures[own].append(f"against completion {other}: {verdict.error}")
            continue
        wins[i] += verdict.score
        wins[j] += 1.0 - verdict.score
        for own in (i, j):
            answered[own] += 1
            if ORDERS_AGREE in verdict.metadata:
                agreed[own] = (agreed[own] or 0) + bool(verdict.metadata[ORDERS_AGREE])
    return [
        CompletionReward(
            score=wins[i] / answered[i] if answered[i] else None,
            comparisons=answered[i],
            failed=len(failures[i]),
            error=_failure_summary(failures[i], answered[i]),
            orders_agreed=agreed[i],
        )
        for i in range(size)
    ]


def position_consistency(verdicts: Sequence[Verdict]) -> float | None:
    """The share of answered comparisons whose two orders chose the same response (pairwise generative judges,
    which report `orders_agree`); None when no verdict reports it."""
    agreements = [v.metadata[ORDERS_AGREE] for v in verdicts if v.score is not None and ORDERS_AGREE in v.metadata]
    return sum(agreements) / len(agreements) if agreements else None


def _failure_summary(failures: list[str], answered: int) -> str | None:
    if not failures:
        return None
    basis = f"the reward is the mean of the {answered} that answered" if answered else "no reward"
    return f"{len(failures)} of {len(failures) + answered} comparisons failed ({basis}): " + "; ".join(failures)


class GroupGatherer:
    """Gathers the one-sample rewards requests of a GRPO group (OpenRLHF's remote reward model sends each
    rollout's samples as they finish) by prompt, as the client does (judge_core.protocol.groups): a group is scored
    once `size` completions of its prompt have arrived, or `window_s` after its first one, from what arrived then.
    A completion left alone has no siblings to be compared with: its reward fails (GroupTooSmall), never a made-up
    0.5. A gathered request waits at most window_s longer than its group's comparisons take. Used on one event
    loop."""

    def __init__(self, size: int, window_s: float, score_group):
        """`score_group(prompt, completions)`: awaitable of their CompletionRewards."""
        self._size, self._window_s, self._score_group = size, window_s, score_group
        self._gatherer: groups.GroupGatherer | None = None  # made on the loop that serves the first request
        self._scoring: set[asyncio.Future] = set()  # kept referenced until done

    async def reward(self, key: str, prompt, completion: str) -> tuple[CompletionReward, int]:
        """The completion's reward and the size of the group it was scored in."""
        loop = asyncio.get_running_loop()
        if self._gatherer is None:
            self._gatherer = groups.GroupGatherer(self._size, self._window_s, self._start, start_timer=loop.call_later)
        answer = loop.create_future()
        self._gatherer.add(key, (prompt, completion, answer))
        return await answer

    def _start(self, members: list) -> None:
        scoring = asyncio.ensure_future(self._score(members))
        self._scoring.add(scoring)
        scoring.add_done_callback(self._scoring.discard)

    async def _score(self, members: list) -> None:
        answers = [answer for _, _, answer in members]
        if len(answers) < 2:
            error = GroupTooSmall(f"no sibling of this prompt arrived within {self._window_s}s to compare it with")
            _settle(answers, error=error)
            return
        try:
            rewards = await self._score_group(members[0][0], [completion for _, completion, _ in members])
        except Exception as err:  # noqa: BLE001  (every waiting request gets the failure)
            _settle(answers, error=err)
            return
        _settle(answers, results=[(reward, len(answers)) for reward in rewards])


class GroupTooSmall(RuntimeError):
    """A gathered completion had no sibling to be compared with."""


def _settle(answers: list[asyncio.Future], results: list | None = None, error: Exception | None = None) -> None:
    for index, answer in enumerate(answers):
        if answer.done():  # its request was cancelled (client left)
            continue
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(results[index])
