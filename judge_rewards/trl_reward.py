"""A judge server as a reward function of TRL's GRPOTrainer, through the reward adapter.

    from judge_rewards.trl_reward import JudgeReward
    trainer = GRPOTrainer(model=..., reward_funcs=[JudgeReward({"judge_url": "http://judge-host:8888"})], ...)

TRL calls a reward function once per batch with `prompts`, `completions` and the dataset's other columns as
keyword lists. Both of TRL's formats are taken: plain text, or conversational (the prompt a list of
{role, content} messages, the completion a list holding the assistant's message). The reference answer comes from
the dataset column `answer_column` (None: no reference). The batch goes to the judge at once
(`JudgeRewardSystem.reward_batch`: cache, batching, retries, circuit breaker); a judge failure is the adapter's
tagged rule fallback, or None, TRL's "no reward" (the sample is left out of the reward), when the fallback is off
or the rules cannot score it either. Where TRL offers it (1.x: `log_metric`, `log_extra`), each batch logs the
share of rewards that the judge did not give, the adapter's reward-health figures (`judge/health_*`, over its
window of recent rewards: judge_rewards/reward_health.py), and each completion's source.

Group-relative pairwise rewards (a pairwise judge, no reference answer: `answer_column=None`): with
`{"group_relative": True}` in the config, the batch's completions are grouped by prompt (TRL repeats each prompt
`num_generations` times in a batch) and each group goes to the judge's POST /judge_group; a completion's reward is
its mean win probability against its siblings. TRL then also logs `<name>/failed_comparisons`, the mean count of
a completion's comparisons that did not answer.

A reward spec (`components`, judge_rewards/reward_spec.py) routes each row by its `route_column` value and logs
`<name>/component/<c>` (the batch mean of component c over the rows it scored), and as extras each completion's
`<name>_component_<c>` value (NaN: none) and `<name>_component_<c>_source`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .composed_reward import COMPONENT_PREFIX
from .judge_reward_adapter import SOURCE_RULE_FALLBACK, ConfigLike, JudgeRewardSystem

NO_REWARD_SOURCE = "none"  # the source logged for a completion that got None


class JudgeReward:
    """`GRPOTrainer(reward_funcs=[JudgeReward(config)])`: one judge reward in [0, 1] (or None) per completion."""

    def __init__(
        self,
        config: ConfigLike = None,
        answer_column: str | None = "answer",
        answer_type_column: str | None = None,
        name: str = "judge",
        rubric_column: str | None = None,
    ):
        self.system = JudgeRewardSystem(config)
        self.answer_column = answer_column
        self.answer_type_column = answer_type_column
        self.rubric_column = rubric_column  # a column of rubrics, for a judge served with a template that reads one
        self.__name__ = name  # TRL names a reward function's metrics after it (0.26 reads __name__)

    def __call__(self, prompts: Sequence, completions: Sequence, **columns) -> list[float | None]:
        answers = self._column(self.answer_column, columns, len(prompts))
        answer_types = self._column(self.answer_type_column, columns, len(prompts))
        items = [
            {"prompt": prompt, "completion": completion_text(completion, i), "answer": answer, "answer_type": kind}
            for i, (prompt, completion, answer, kind) in enumerate(
                zip(prompts, completions, answers, answer_types, strict=True)
            )
        ]
        if self.rubric_column:
            rubrics = self._column(self.rubric_column, columns, len(prompts))
            items = [{**item, "rubric": rubric} for item, rubric in zip(items, rubrics, strict=True)]
        if self.system.route_column:  # a reward spec with routes: by the route column
            routes = self._column(self.system.route_column, columns, len(prompts))
            items = [{**item, "data_source": route} for item, route in zip(items, routes, strict=True)]
        outcomes = self.system.reward_batch(items, return_exceptions=True)
        rewards = [outcome["reward"] if isinstance(outcome, dict) else None for outcome in outcomes]
        sources = [outcome["source"] if isinstance(outcome, dict) else NO_REWARD_SOURCE for outcome in outcomes]
        if "log_metric" in columns and self.system.config.group_relative:
            failed = [outcome.get("failed", 0) for outcome in outcomes if isinstance(outcome, dict)]
            columns["log_metric"](f"{self.__name__}/failed_comparisons", sum(failed) / max(1, len(failed)))
        if "log_metric" in columns:
            not_judged = sum(source in (SOURCE_RULE_FALLBACK, NO_REWARD_SOURCE) for source in sources)
            columns["log_metric"](f"{self.__name__}/not_from_judge", not_judged / len(sources))
            for figure, value in self.system.health_figures().items():
                columns["log_metric"](f"{self.__name__}/{figure}", value)
        if "log_extra" in columns:
            columns["log_extra"](f"{self.__name__}_source", sources)
        self._log_components(outcomes, columns)
        return rewards

    def _log_components(self, outcomes: list, columns: Mapping[str, Any]) -> None:
        """A reward spec's components: each one's batch mean (over the rows it scored) as `<name>/component/<c>`,
        and its per-completion values and sources as extras."""
        rewarded = [outcome for outcome in outcomes if isinstance(outcome, dict) and "components" in outcome]
        if not rewarded:
            return
        for key in [key for key in rewarded[0] if key.startswith(COMPONENT_PREFIX)]:
            values = [outcome[key] if isinstance(outcome, dict) else math.nan for outcome in outcomes]
            scored = [value for value in values if not math.isnan(value)]
            if "log_metric" in columns and scored:
                columns["log_metric"](f"{self.__name__}/{key}", sum(scored) / len(scored))
            if "log_extra" in columns:
                name = key[len(COMPONENT_PREFIX) :]
                columns["log_extra"](f"{self.__name__}_component_{name}", values)
                sources = [
                    ((outcome.get("components") or {}).get(name) or {}).get("source")
                    if isinstance(outcome, dict)
                    else None
                    for outcome in outcomes
                ]
                columns["log_extra"](
                    f"{self.__name__}_component_{name}_source", [s or NO_REWARD_SOURCE for s in sources]
                )

    def close(self) -> None:
        self.system.close()

    def _column(self, name: str | None, columns: Mapping[str, Any], rows: int) -> list:
        if name is None:
            return [None] * rows
        if name not in columns:
            dataset_columns = sorted(key for key, value in columns.items() if isinstance(value, list))
            raise KeyError(
                f"JudgeReward: the dataset has no column {name!r} (columns passed by the trainer: {dataset_columns}); "
                f"add it, or name the right one (answer_column=..., or None for no reference answer)"
            )
        return list(columns[name])


def completion_text(completion: str | Sequence[Mapping[str, Any]], index: int) -> str:
    """A completion's text: a plain completion as it is; a conversational one, the content of its assistant
    message(s)."""
    if isinstance(completion, str):
        return completion
    contents = [message.get("content") for message in completion if message.get("role") == "assistant"]
    if not contents or not all(isinstance(content, str) for content in contents):
        raise ValueError(
            f"JudgeReward: completion {index} is neither text nor a message list with an assistant message of "
            f"text content: {str(completion)[:200]}"
        )
    return "\n".join(contents)
