"""A composed reward: the components of a reward spec (judge_rewards.reward_spec) scored and combined per row.

Every reward dict carries, besides the adapter's keys (`reward`, `source`, `explanation`, `request_id`, `error`,
`detailed_scores`):
  spec              the spec that scored the row (its route)
  components        name -> {reward, source, error, weight}, for the spec's components; source is judge, cache,
                    rule or rule_fallback; a component left out (on_failure renormalise) has reward None and its error
  failed            the components that could not score the row, name -> the policy that applied
  component/<name>  a float per component of the whole config, the same keys on every row (for loggers):
                    its value, NaN where it has none (not in the row's spec, or left out)
The row's `source` is `rule` when the spec has only rules, `rule_fallback` when a judge component failed,
`cache` when every judge answer came from the cache, else `judge`. A row that cannot get a reward raises
ComponentFailure (a JudgeUnavailableError), naming the components and policies; never a silent 0.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from judge_core import rules
from judge_core.protocol.judge_api import JudgeItem

from .judge_client import JudgeUnavailableError
from .reward_health import RewardHealth
from .reward_spec import RewardSpec, Spec, parse_spec

SOURCE_RULE = "rule"
SOURCE_RULE_FALLBACK = "rule_fallback"
COMPONENT_PREFIX = "component/"
COMPONENT_HEALTH = ("health_judge_rule_agreement", "health_rule_pair_accuracy", "health_fallback_share")
ROUTE_KEY = "data_source"  # the item key a row's route value arrives under


class ComponentFailure(JudgeUnavailableError):
    """A row of a composed reward got no reward: `failed` maps each failed component to the policy applied."""

    def __init__(self, message: str, failed: dict[str, str], spec: str | None):
        super().__init__(message)
        self.failed = failed
        self.spec = spec


@dataclass(frozen=True)
class ComposedSettings:
    """What the trainer hooks read of a system's `config`."""

    group_relative: bool


@dataclass
class _Scored:
    reward: float | None
    source: str | None
    error: str | None


class ComposedReward:
    """The rewards of a reward spec; built by JudgeRewardSystem when its config has `components`."""

    def __init__(self, config: Mapping[str, Any], make_warner, judge_class):
        """`judge_class`: the adapter class each judge component is (BaseJudgeReward: passed in, it imports this)."""
        self.spec: RewardSpec = parse_spec(config)
        kinds = {c.type for c in self.spec.components.values()}
        self.config = ComposedSettings("group_judge" in kinds)
        self.judges = {name: judge_class(c.judge) for name, c in self.spec.components.items() if c.judge is not None}
        self._health = RewardHealth(self.spec.health, make_warner)

    def reward_batch(self, items: Iterable[Mapping[str, Any]], return_exceptions: bool = False) -> list:
        items = [dict(item) for item in items]
        specs = [self._route(item) for item in items]
        requests = [_request(item) for item in items]
        answers = self._judge_all(items, specs)
        rewards = []
        for index, (request, spec) in enumerate(zip(requests, specs, strict=True)):
            try:
                if isinstance(spec, Exception):
                    raise spec
                scored = {name: answers[name][index] for name in spec.weights if name in answers}
                rewards.append(self._combined(request, spec, scored))
            except JudgeUnavailableError as err:
                if not return_exceptions:
                    raise
                rewards.append(err)
        return rewards

    async def areward(self, item: Mapping[str, Any], data_source=None) -> dict:
        """One row's reward, awaited: `item` as reward_batch's, its route value apart."""
        item = dict(item)
        spec = self._route({**item, ROUTE_KEY: data_source})
        if isinstance(spec, Exception):
            raise spec
        names = [name for name in spec.weights if name in self.judges]

        async def one(name: str):
            try:
                return _judged(await self.judges[name].areward(**item))
            except JudgeUnavailableError as err:
                return _Scored(None, None, str(err))

        answers = await asyncio.gather(*(one(name) for name in names))
        request = _request(item)
        return await asyncio.to_thread(self._combined, request, spec, dict(zip(names, answers, strict=True)))

    def get_metrics(self) -> dict:
        return {
            "components": {name: judge.get_metrics() for name, judge in self.judges.items()},
            "reward_health": self.health_figures(),
        }

    def health_figures(self, fresh: bool = True) -> dict[str, float]:
        """The combined reward's health figures, and per judge component its agreement with the rules, its
        pair accuracy and its fallback share (component/<name>/health_...)."""
        figures = self._health.figures(fresh)
        for name, judge in self.judges.items():
            own = judge.health_figures(fresh)
            figures.update({f"{COMPONENT_PREFIX}{name}/{key}": own[key] for key in COMPONENT_HEALTH})
        return figures

    def close(self) -> None:
        for judge in self.judges.values():
            judge.close()

    def _route(self, item: dict):
        route = item.pop(ROUTE_KEY, None)
        try:
            return self.spec.spec_for(route)
        except KeyError as err:
            return ComponentFailure(f"reward spec: {err.args[0]}", {}, None)

    def _judge_all(self, items: list[dict], specs: list) -> dict[str, list]:
        """name -> per row, the judge component's _Scored (None for rows whose spec does not use it)."""
        wanted = {
            name: [i for i, spec in enumerate(specs) if not isinstance(spec, Exception) and name in spec.weights]
            for name in self.judges
        }
        wanted = {name: rows for name, rows in wanted.items() if rows}
        if not wanted:
            return {}

        def ask(name: str) -> list:
            outcomes = self.judges[name].reward_batch([items[i] for i in wanted[name]], return_exceptions=True)
            column: list = [None] * len(items)
            for row, outcome in zip(wanted[name], outcomes, strict=True):
                failed = isinstance(outcome, Exception)
                column[row] = _Scored(None, None, str(outcome)) if failed else _judged(outcome)
            return column

        with concurrent.futures.ThreadPoolExecutor(len(wanted), thread_name_prefix="ComposedReward") as pool:
            return dict(zip(wanted, pool.map(ask, wanted), strict=True))

    def _combined(self, request: JudgeItem, spec: Spec, judged: dict[str, _Scored]) -> dict:
        """The row's reward dict: each component scored (rules here), the failure policies applied, combined."""
        scored: dict[str, _Scored] = {}
        failed: dict[str, str] = {}
        for name in spec.weights:
            component = self.spec.components[name]
            value = judged[name] if name in judged else _rule(request, SOURCE_RULE)
            if value.reward is None:
                failed[name] = component.on_failure
                if component.on_failure == "rule":
                    fallback = _rule(request, SOURCE_RULE_FALLBACK)
                    error = value.error
                    if fallback.reward is None:
                        error = f"{value.error}; the rule cannot score it either: {fallback.error}"
                    value = _Scored(fallback.reward, fallback.source, error)
            scored[name] = value
        self._raise_for_failures(spec, scored, failed)
        reward = combine(spec, {name: s.reward for name, s in scored.items() if s.reward is not None})
        result = self._reward_dict(spec, scored, failed, reward)
        self._health.observe(request, result)
        return result

    def _raise_for_failures(self, spec: Spec, scored: dict[str, _Scored], failed: dict[str, str]) -> None:
        missing = [name for name, s in scored.items() if s.reward is None]
        fatal = [name for name in missing if failed[name] != "renormalise"]
        if spec.combine == "gate" and spec.gate in missing:
            fatal.append(spec.gate)
        if fatal or len(missing) == len(scored):
            reasons = "; ".join(f"{name} (on_failure={failed[name]}): {scored[name].error}" for name in missing)
            raise ComponentFailure(f"reward spec {spec.name!r}: no reward: {reasons}", failed, spec.name)

    def _reward_dict(self, spec: Spec, scored: dict[str, _Scored], failed: dict[str, str], reward: float) -> dict:
        sources = {s.source for name, s in scored.items() if name in self.judges}
        if not sources:
            source = SOURCE_RULE
        elif failed.keys() & self.judges.keys():
            source = SOURCE_RULE_FALLBACK
        else:
            source = "cache" if sources == {"cache"} else "judge"
        components = {
            name: {"reward": s.reward, "source": s.source, "error": s.error, "weight": spec.weights[name]}
            for name, s in scored.items()
        }
        flat = {f"{COMPONENT_PREFIX}{name}": math.nan for name in self.spec.components}
        flat.update({f"{COMPONENT_PREFIX}{name}": s.reward for name, s in scored.items() if s.reward is not None})
        shown = ", ".join(
            f"{name}={s.reward if s.reward is None else round(s.reward, 3)}" for name, s in scored.items()
        )
        errors = [f"{name}: {s.error}" for name, s in scored.items() if s.error]
        return {
            "reward": reward,
            "source": source,
            "explanation": f"{spec.combine} of {shown}" + (f" (failed: {failed})" if failed else ""),
            "request_id": None,
            "error": "; ".join(errors) or None,
            "detailed_scores": None,
            "spec": spec.name,
            "components": components,
            "failed": failed,
            **flat,
        }


def combine(spec: Spec, values: dict[str, float]) -> float:
    """The spec's combine over the values of the components that have one (reward_spec's docstring)."""
    if spec.combine == "min":
        return min(values.values())
    if spec.combine == "gate":
        if values[spec.gate] < 0.5:
            return values[spec.gate]
        others = {name: value for name, value in values.items() if name != spec.gate}
        total = sum(spec.weights[name] for name in others)
        if not others or total == 0:
            return values[spec.gate]
        return sum(spec.weights[name] * value for name, value in others.items()) / total
    weights = {name: spec.weights[name] for name in values}
    if spec.combine == "vote":
        passing = sum(w for name, w in weights.items() if values[name] >= 0.5)
        failing = sum(weights.values()) - passing
        return 1.0 if passing > failing else 0.0 if failing > passing else 0.5
    total = sum(weights.values())
    weighted = sum(weights[name] * value for name, value in values.items())
    all_weights = sum(spec.weights.values())
    return weighted if total == all_weights or total == 0 else weighted * all_weights / total


def _judged(reward: dict) -> _Scored:
    return _Scored(float(reward["reward"]), reward["source"], reward.get("error"))


def _rule(request: JudgeItem, source: str) -> _Scored:
    try:
        return _Scored(rules.score_answer(request.completion, request.answer, request.answer_type).score, source, None)
    except ValueError as err:
        return _Scored(None, None, f"rule: {err}")


def _request(item: Mapping[str, Any]) -> JudgeItem:
    return JudgeItem.create(
        item["prompt"], item["completion"], item.get("answer"), item.get("answer_type"), item.get("rubric")
    )
