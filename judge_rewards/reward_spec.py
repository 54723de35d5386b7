"""The reward spec: named components (judges, rule checks, group-relative judges) combined into one reward, and
routes from a row's data source to a spec. Parsed and checked at start-up; a bad spec raises ConfigError naming
its key (`components.judge.weight`, `routes.gsm8k`, ...).

    reward:
      config:
        judge_url: ${JUDGE_MODEL_URL}   # the adapter's keys: shared by every judge component
        components:                     # name -> component
          judge: {type: judge, weight: 0.7, on_failure: renormalise}
          arithmetic: {type: rule, weight: 0.3}
          pairwise: {type: group_judge, judge_url: http://pairwise:8888, group_size: 4}
        combine: weighted_sum           # the default spec's combine (and every spec's default)
        specs:                          # optional: named specs, each a subset of the components
          math: {components: [arithmetic, judge], combine: gate, gate: arithmetic}
          chat: {components: {judge: 1.0}}
        routes: {gsm8k: math, "*": chat}   # data_source (verl) or route_column value (TRL) -> spec
        route_column: data_source

The spec keys may instead sit in a YAML file named by `reward_spec: FILE` (e.g. verl's
`custom_reward_function.reward_kwargs.reward_spec`, one value on a command line); the adapter's other keys stay
beside it.

Without `specs` there is one spec, `default`, of all components (top-level `combine`, `gate`). Combines, over the
values r_i (in [0, 1]) and weights w_i of a row's spec:
  weighted_sum  sum of w_i * r_i; when components were left out (on_failure renormalise), the sum over those that
                answered times (sum of all w_i) / (sum of the answered w_i)
  min           the smallest r_i (weights ignored)
  vote          1.0 when the weight of r_i >= 0.5 is more than half, 0.0 when less, 0.5 on a tie
  gate          the `gate` rule component passes (its r >= 0.5): the weighted mean of the other components that
                answered (sum of w_i * r_i / sum of w_i: a lone judge's own score); else the gate's score (< 0.5)
on_failure, when a component cannot score a row (its judge down or breaker open, a rule without a reference):
  renormalise   leave it out and combine the rest (the row fails when nothing is left)
  rule          score it with judge_core.rules (source rule_fallback); the row fails when the rules cannot
  fail          the row fails: JudgeUnavailableError (a ComponentFailure naming the components and policies)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from judge_core.settings import option

from .reward_config import ConfigError, JudgeRewardConfig, _as_float

COMPONENT_TYPES = ("judge", "rule", "group_judge")
COMBINES = ("weighted_sum", "min", "vote", "gate")
POLICIES = ("renormalise", "rule", "fail")
DEFAULT_SPEC = "default"
ANY_ROUTE = "*"


@dataclass(frozen=True)
class RewardSpecConfig:
    """The spec keys of `reward.config` (beside the adapter's keys)."""

    components: dict = option(None, "name -> component ({type: judge|rule|group_judge, weight, on_failure, ...})")
    combine: str = option("weighted_sum", "how a spec's components combine: weighted_sum | min | vote | gate")
    gate: str | None = option(None, "with combine gate: the rule component whose pass lets the others count")
    specs: dict | None = option(None, "name -> {components: [names] or {name: weight}, combine, gate}")
    routes: dict | None = option(None, "a row's data_source (or route_column value) -> spec name; '*': the rest")
    route_column: str = option("data_source", "the dataset column TRL routes by")


@dataclass(frozen=True)
class ComponentConfig:
    """One component of `components`; a judge's other keys are adapter keys (judge_url, timeout, ...)."""

    type: str = option(None, "judge (POST /batch_judge), rule (judge_core.rules), group_judge (/judge_group)")
    weight: float = option(1.0, "its weight in weighted_sum, vote and gate (any finite number)")
    on_failure: str | None = option(None, "renormalise | rule | fail; default rule for judges, fail for rules")
    judge: JudgeRewardConfig | None = None  # a judge's own settings (None for a rule)


@dataclass(frozen=True)
class Spec:
    name: str
    weights: dict[str, float]  # component name -> weight, in order
    combine: str
    gate: str | None


@dataclass(frozen=True)
class RewardSpec:
    components: dict[str, ComponentConfig]
    specs: dict[str, Spec]
    routes: dict[str, str]
    route_column: str
    health: JudgeRewardConfig  # whose health_* thresholds the spec's reward health reads: a judge's, else the base

    def spec_for(self, route: Any) -> Spec:
        """The spec of a row whose route value is `route`; KeyError naming the routes when none applies."""
        if not self.routes:
            return next(iter(self.specs.values()))
        name = self.routes.get(str(route)) if route is not None else None
        name = name or self.routes.get(ANY_ROUTE)
        if name is None:
            raise KeyError(f"no route for {self.route_column} {route!r} (routes: {sorted(self.routes)})")
        return self.specs[name]


SPEC_KEYS = tuple(field.name for field in dataclasses.fields(RewardSpecConfig))
SPEC_FILE_KEY = "reward_spec"
RULES_ONLY_URL = "http://no-judge.invalid"  # the judge_url a spec without judges never calls


def has_spec(config: Any) -> bool:
    return isinstance(config, Mapping) and "components" in config


def with_spec_file(config: Any) -> Any:
    """`config` with the spec keys of its `reward_spec` YAML file in place of that key (None or absent: dropped)."""
    if not isinstance(config, Mapping) or SPEC_FILE_KEY not in config:
        return config
    rest = {key: value for key, value in config.items() if key != SPEC_FILE_KEY}
    path = config[SPEC_FILE_KEY]
    if path is None:
        return rest
    import yaml  # every trainer's environment has PyYAML; the bare client needs it only for a spec file

    try:
        with open(path, encoding="utf-8") as file:
            loaded = yaml.safe_load(file)
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"reward config {SPEC_FILE_KEY}: cannot read {path}: {err}") from None
    _need(isinstance(loaded, Mapping), SPEC_FILE_KEY, f"{path} must hold a YAML mapping of {SPEC_KEYS}")
    unknown = sorted(set(loaded) - set(SPEC_KEYS))
    _need(not unknown, SPEC_FILE_KEY, f"{path}: unknown keys {unknown}; a spec file takes {SPEC_KEYS}")
    twice = sorted(set(loaded) & set(rest))
    _need(not twice, SPEC_FILE_KEY, f"{path} sets {twice}, which the config sets too")
    _need("components" in loaded, SPEC_FILE_KEY, f"{path} has no components")
    return {**rest, **loaded}


def parse_spec(config: Mapping[str, Any]) -> RewardSpec:
    """The checked RewardSpec of a `reward.config` mapping with `components`."""
    base = {key: value for key, value in config.items() if key not in SPEC_KEYS}
    top = {key: config[key] for key in SPEC_KEYS if key in config}
    _need(isinstance(top["components"], Mapping) and top["components"], "components", "must be a non-empty mapping")
    combine = top.get("combine", "weighted_sum")
    components = {str(name): _component(str(name), raw, base) for name, raw in top["components"].items()}
    specs_raw = top.get("specs")
    if specs_raw is None:
        specs = {DEFAULT_SPEC: _spec(DEFAULT_SPEC, {"combine": combine, "gate": top.get("gate")}, components, "")}
    else:
        _need(isinstance(specs_raw, Mapping) and specs_raw, "specs", "must be a non-empty mapping of name -> spec")
        _need(top.get("gate") is None, "gate", "with specs, set gate in the spec that gates")
        specs = {
            str(name): _spec(str(name), {"combine": combine, **_mapping(raw, f"specs.{name}")}, components, "specs.")
            for name, raw in specs_raw.items()
        }
    routes = top.get("routes") or {}
    _need(isinstance(routes, Mapping), "routes", "must be a mapping of data_source -> spec name")
    for value, target in routes.items():
        _need(str(target) in specs, f"routes.{value}", f"routes to no spec: {target!r} (specs: {sorted(specs)})")
    _need(bool(routes) or len(specs) == 1, "routes", f"several specs ({sorted(specs)}) need routes to reach them")
    column = top.get("route_column", "data_source")
    _need(isinstance(column, str) and column, "route_column", f"must be a column name, got {column!r}")
    judges = [c.judge for c in components.values() if c.judge is not None]
    health = judges[0] if judges else _rules_only_settings(base)
    return RewardSpec(components, specs, {str(k): str(v) for k, v in routes.items()}, column, health)


def _rules_only_settings(base: dict) -> JudgeRewardConfig:
    """The adapter keys of a spec without judges, checked as a judge's would be (a misspelled key is an error);
    no judge is called, so a missing judge_url is no error."""
    return JudgeRewardConfig.from_mapping({"judge_url": RULES_ONLY_URL, **base})


def _component(name: str, raw: Any, base: dict) -> ComponentConfig:
    key = f"components.{name}"
    raw = dict(_mapping(raw, key))
    kind = raw.pop("type", None)
    _need(kind in COMPONENT_TYPES, f"{key}.type", f"must be one of {COMPONENT_TYPES}, got {kind!r}")
    weight = _weight(raw.pop("weight", 1.0), f"{key}.weight")
    policy = raw.pop("on_failure", None) or ("fail" if kind == "rule" else "rule")
    _need(policy in POLICIES, f"{key}.on_failure", f"must be one of {POLICIES}, got {policy!r}")
    _need(not (kind == "rule" and policy == "rule"), f"{key}.on_failure", "a rule cannot fall back to itself")
    if kind == "rule":
        _need(not raw, key, f"a rule component takes type, weight and on_failure only, got {sorted(raw)}")
        return ComponentConfig(kind, weight, policy)
    forced = {"fallback_to_rule": False, "group_relative": kind == "group_judge"}
    try:
        judge = JudgeRewardConfig.from_mapping({**base, **raw, **forced})
    except ConfigError as err:
        raise ConfigError(str(err).replace("reward config ", f"reward config {key}.", 1)) from None
    return ComponentConfig(kind, weight, policy, judge)


def _spec(name: str, raw: Mapping, components: dict[str, ComponentConfig], prefix: str) -> Spec:
    key = f"{prefix}{name}" if prefix else ""
    at = f"{key}." if key else ""
    members = raw.get("components", list(components) if not prefix else None)
    _need(isinstance(members, list | Mapping) and members, f"{at}components", "must list the spec's components")
    weights = {}
    for member in members:
        _need(str(member) in components, f"{at}components", f"unknown component {member!r} ({sorted(components)})")
        given = members[member] if isinstance(members, Mapping) else None
        weight = components[str(member)].weight if given is None else _weight(given, f"{at}components.{member}")
        weights[str(member)] = weight
    combine = raw.get("combine", "weighted_sum")
    _need(combine in COMBINES, f"{at}combine", f"must be one of {COMBINES}, got {combine!r}")
    gate = raw.get("gate")
    if combine == "gate":
        _need(gate in weights, f"{at}gate", f"must name a component of the spec, got {gate!r}")
        _need(components[gate].type == "rule", f"{at}gate", f"must be a rule component, {gate!r} is a judge")
        _need(len(weights) >= 2, f"{at}components", "a gate needs a component to gate")
    else:
        _need(gate is None, f"{at}gate", f"is only read with combine gate (combine is {combine!r})")
    unknown = sorted(set(raw) - {"components", "combine", "gate"})
    _need(not unknown, key or "spec", f"unknown keys {unknown}; a spec takes components, combine, gate")
    return Spec(name, weights, combine, gate)


def _weight(raw: Any, key: str) -> float:
    try:
        weight = _as_float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"reward config {key}: must be a number, got {raw!r}") from None
    _need(math.isfinite(weight), key, f"must be a finite number, got {raw!r}")
    return weight


def _mapping(raw: Any, key: str) -> Mapping:
    _need(isinstance(raw, Mapping), key, f"must be a mapping, got {type(raw).__name__}")
    return raw


def _need(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"reward config {key}: {message}")
