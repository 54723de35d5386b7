"""Reward health: figures about the rewards themselves, over a window of the most recent ones.

A learned reward fails quietly: the policy learns to please the judge (reward hacking, often through length),
or the judge stops telling a group's answers apart (every GRPO advantage 0). These figures show both, where the
rewards are computed. Each is a float (NaN while the window holds too little to say):

    health_window               rewards in the window (`health_window` most recent ones)
    health_reward_mean/_std     the rewards' mean and standard deviation
    health_reward_hist_K        share of the window's rewards in bucket K of 10 equal buckets of [0, 1]
                                (hist_0: [0, 0.1), ..., hist_9: [0.9, 1.0])
    health_tied_group_share     share of GRPO groups (rewards of one prompt, 2 or more) whose rewards all tie:
                                such a group gives GRPO no advantage, so no learning signal
    health_length_rank_corr     within-group Spearman correlation of reward with answer length (characters),
                                averaged over groups where both vary (NaN below 8 such groups): near +1, longer
                                answers win in every group
    health_judge_rule_agreement share of judged rewards that agree with judge_core.rules on the reference answer
                                (both >= 0.5 or both < 0.5), over rewards that have a reference the rules can score
    health_rule_accuracy        the rules' mean score of those same answers: an independent check the judge never sees
    health_rule_pairs           pairs of one rule-right and one rule-wrong answer to the same prompt in the window
    health_rule_pair_accuracy   share of those pairs in which the judge rewards the right answer more (a tie counts
                                half): 0.5 means GRPO's advantages point to the right answer no more often than away
                                from it, whatever the judge's reward does
    health_fallback_share       share of the window's rewards from the rule fallback (the judge did not answer)

A figure past its threshold (the `health_*_warn` keys of JudgeRewardConfig) logs a warning, at most one per
signal per interval, once the window holds `health_warn_after` rewards.
"""

from __future__ import annotations

import collections
import json
import math
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from judge_core import rules
from judge_core.protocol.judge_api import JudgeItem

HISTOGRAM_BUCKETS = 10
TIE_TOLERANCE = 1e-6
RECOMPUTE_EVERY = 32  # new rewards after which the cached figures are computed again
SOURCE_RULE_FALLBACK = "rule_fallback"
MIN_RULE_PAIRS_TO_WARN = 20  # fewer pairs than this leave the pair accuracy too noisy to warn on (its SE >= 0.1)
# A group of 4 alone gives a correlation of +-1 by chance often; the mean of 8 has a spread near 0.2.
MIN_LENGTH_GROUPS = 8


class Warner(Protocol):
    def warn(self, message: str) -> None: ...


@dataclass(frozen=True)
class Observation:
    group: str
    reward: float
    length: int
    from_fallback: bool
    rule_score: float | None  # None: no reference answer the rules can score


class RewardHealth:
    """The window of recent rewards and its figures; `observe` each reward, read `figures()`."""

    def __init__(self, config, make_warner: Callable[[], Warner]):
        self.config = config
        self._window: collections.deque[Observation] = collections.deque(maxlen=config.health_window)
        self._lock = threading.Lock()
        self._since_computed = 0
        self._figures = figures_of([])
        self._warners = collections.defaultdict(make_warner)

    def observe(self, request: JudgeItem, reward: dict) -> None:
        observation = Observation(
            group=json.dumps(request.prompt, ensure_ascii=False),
            reward=float(reward["reward"]),
            length=len(request.completion),
            from_fallback=reward["source"] == SOURCE_RULE_FALLBACK,
            rule_score=None if reward["source"] == SOURCE_RULE_FALLBACK else _rule_score(request),
        )
        with self._lock:
            self._window.append(observation)
            self._since_computed += 1
            stale = self._since_computed >= RECOMPUTE_EVERY
        if stale:
            self.figures(fresh=True)

    def figures(self, fresh: bool = True) -> dict[str, float]:
        """The figures of the window (fresh: computed now; otherwise those of at most RECOMPUTE_EVERY rewards ago)."""
        with self._lock:
            if not fresh:
                return dict(self._figures)
            window = list(self._window)
            self._since_computed = 0
        figures = figures_of(window)
        with self._lock:
            self._figures = figures
        self._warn(figures)
        return dict(figures)

    def _warn(self, figures: dict[str, float]) -> None:
        if figures["health_window"] < self.config.health_warn_after:
            return
        for name, message in warnings_of(figures, self.config):
            self._warners[name].warn(message)


def warnings_of(figures: dict[str, float], config) -> list[tuple[str, str]]:
    """(figure, message) for each figure past its threshold (NaN figures never warn)."""
    window = int(figures["health_window"])
    found = []
    if figures["health_length_rank_corr"] >= config.health_length_corr_warn:
        found.append(
            (
                "health_length_rank_corr",
                f"reward health: within-group rank correlation of reward with answer length is "
                f"{figures['health_length_rank_corr']:.2f} (>= {config.health_length_corr_warn}) over the last "
                f"{window} rewards: longer answers win; the policy may be gaming the judge through length",
            )
        )
    if figures["health_tied_group_share"] >= config.health_tied_groups_warn:
        found.append(
            (
                "health_tied_group_share",
                f"reward health: {figures['health_tied_group_share']:.0%} of GRPO groups have all-equal rewards "
                f"(>= {config.health_tied_groups_warn:.0%}): those groups give no advantage, so no learning signal",
            )
        )
    if figures["health_judge_rule_agreement"] < config.health_agreement_warn:
        found.append(
            (
                "health_judge_rule_agreement",
                f"reward health: the judge agrees with the rule scorer on {figures['health_judge_rule_agreement']:.0%} "
                f"of answers with a reference (< {config.health_agreement_warn:.0%}); the judge and the verifiable "
                f"check disagree",
            )
        )
    if (
        figures["health_rule_pairs"] >= MIN_RULE_PAIRS_TO_WARN
        and figures["health_rule_pair_accuracy"] < config.health_pair_accuracy_warn
    ):
        found.append(
            (
                "health_rule_pair_accuracy",
                f"reward health: in {figures['health_rule_pairs']:.0f} pairs of a rule-right and a rule-wrong answer "
                f"to the same prompt, the judge rewards the right one more in "
                f"{figures['health_rule_pair_accuracy']:.0%} (< {config.health_pair_accuracy_warn:.0%}): GRPO's "
                f"advantages barely point to right answers; the policy can gain the judge's reward without getting "
                f"answers right",
            )
        )
    if figures["health_fallback_share"] > config.health_fallback_warn:
        found.append(
            (
                "health_fallback_share",
                f"reward health: {figures['health_fallback_share']:.0%} of the last {window} rewards came from the "
                f"rule fallback (> {config.health_fallback_warn:.0%}): the judge is often not answering",
            )
        )
    return found


def figures_of(window: list[Observation]) -> dict[str, float]:
    rewards = [o.reward for o in window]
    figures = {
        "health_window": float(len(window)),
        "health_reward_mean": statistics.fmean(rewards) if rewards else math.nan,
        "health_reward_std": statistics.pstdev(rewards) if rewards else math.nan,
    }
    counts = collections.Counter(min(HISTOGRAM_BUCKETS - 1, max(0, int(r * HISTOGRAM_BUCKETS))) for r in rewards)
    for bucket in range(HISTOGRAM_BUCKETS):
        figures[f"health_reward_hist_{bucket}"] = counts[bucket] / len(rewards) if rewards else math.nan
    groups = collections.defaultdict(list)
    for o in window:
        groups[o.group].append(o)
    groups = [members for members in groups.values() if len(members) >= 2]
    figures["health_tied_group_share"] = (
        sum(_tied([o.reward for o in g]) for g in groups) / len(groups) if groups else math.nan
    )
    correlations = [c for g in groups if (c := spearman([o.length for o in g], [o.reward for o in g])) is not None]
    figures["health_length_rank_corr"] = (
        statistics.fmean(correlations) if len(correlations) >= MIN_LENGTH_GROUPS else math.nan
    )
    checked = [o for o in window if o.rule_score is not None]
    figures["health_judge_rule_agreement"] = (
        sum((o.reward >= 0.5) == (o.rule_score >= 0.5) for o in checked) / len(checked) if checked else math.nan
    )
    figures["health_rule_accuracy"] = statistics.fmean(o.rule_score for o in checked) if checked else math.nan
    figures["health_rule_pairs"], figures["health_rule_pair_accuracy"] = rule_pair_accuracy(
        [[(o.reward, o.rule_score) for o in g] for g in groups]
    )
    figures["health_fallback_share"] = sum(o.from_fallback for o in window) / len(window) if window else math.nan
    return figures


def rule_pair_accuracy(groups: list[list[tuple[float, float | None]]]) -> tuple[float, float]:
    """(pairs, accuracy) over each group's (reward, rule score) answers: every pair of a rule-right (score >= 0.5)
    and a rule-wrong (score < 0.5) answer, and the share in which the right one has the higher reward (ties: half)."""
    pairs = ordered = 0.0
    for group in groups:
        for right_reward, right_rule in group:
            for wrong_reward, wrong_rule in group:
                if right_rule is not None and wrong_rule is not None and right_rule >= 0.5 > wrong_rule:
                    pairs += 1
                    ordered += 1.0 if right_reward > wrong_reward else 0.5 if right_reward == wrong_reward else 0.0
    return pairs, ordered / pairs if pairs else math.nan


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (ties get their mean rank); None when either side does not vary."""
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2
        start = end + 1
    return ranks


def _tied(rewards: list[float]) -> bool:
    return max(rewards) - min(rewards) <= TIE_TOLERANCE


def _rule_score(request: JudgeItem) -> float | None:
    if request.answer is None:
        return None
    try:
        return rules.score_answer(request.completion, request.answer, request.answer_type).score
    except ValueError:  # a reference the rules cannot score (e.g. free text): no agreement to measure
        return None
