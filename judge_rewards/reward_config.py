"""The reward adapter's configuration: the `reward.config` mapping of a training YAML, typed and checked.

Where a value comes from, first match wins:
  1. the key in the mapping, with `${VAR}` / `${VAR:-default}` references resolved from the environment
     (a reference to an unset variable counts as the key being absent);
  2. the key's environment variable, when it has one (JUDGE_MODEL_URL, JUDGE_MODEL_API_KEY,
     JUDGE_MAX_BATCH_SIZE, JUDGE_MAX_CONCURRENT, JUDGE_GROUP_RELATIVE, JUDGE_GROUP_SCHEDULE, JUDGE_GROUP_K,
     JUDGE_GROUP_SIZE);
  3. the default.
Strings (from the environment or a YAML) are cast to the field's type; a bad value raises
`ConfigError` naming the key and where the value came from. The keys are declared as settings
(judge_core.settings.option: help text, environment variable, secret) and read from there.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from judge_core.settings import option, setting_types

GROUP_SCHEDULES = ("all_pairs", "k_random")


class ConfigError(ValueError):
    """A reward adapter setting is missing, of the wrong type or out of range."""


@dataclass(frozen=True)
class JudgeRewardConfig:
    judge_url: str | None = option(
        None, "base URL of the judge server, e.g. http://judge-host:8888", env="JUDGE_MODEL_URL"
    )
    api_key: str | None = option(
        None, "sent as `Authorization: Bearer <key>`; none when unset", env="JUDGE_MODEL_API_KEY", secret=True
    )
    use_cache: bool = option(
        True, "keep judge scores of identical (prompt, completion, answer, answer_type) in an LRU cache"
    )
    cache_size: int = option(5000, "most entries in the LRU score cache")
    max_batch_size: int = option(16, "most items in one POST /batch_judge", env="JUDGE_MAX_BATCH_SIZE")
    batch_timeout: float = option(0.05, "seconds a batch waits for more items after its first one")
    max_concurrent_requests: int = option(
        32, "most HTTP requests to the judge in flight at once", env="JUDGE_MAX_CONCURRENT"
    )
    timeout: float = option(30.0, "seconds one HTTP attempt may take")
    fallback_to_rule: bool = option(
        True,
        "score with judge_core.rules (source rule_fallback) when the judge cannot answer; "
        "else raise JudgeUnavailableError",
    )
    max_retries: int = option(
        3,
        "retries of a batch after a timeout, connection error, 408, 429 or 5xx (exponential backoff with full "
        "jitter; a Retry-After in seconds sets the wait, capped like the backoff)",
    )
    circuit_breaker_threshold: int = option(
        5, "consecutive failed batches that open the circuit (requests then fail fast)"
    )
    circuit_breaker_timeout: float = option(
        30.0, "seconds the circuit stays open before one probe batch is let through"
    )
    max_queue_size: int = option(
        10_000, "most items waiting or in flight; past it a request fails with 'Request queue full'"
    )
    health_window: int = option(1024, "most recent rewards the reward-health figures describe")
    health_warn_after: int = option(64, "rewards the window must hold before a reward-health figure warns")
    health_length_corr_warn: float = option(
        0.5, "warn when the within-group rank correlation of reward with answer length reaches this"
    )
    health_tied_groups_warn: float = option(0.5, "warn when this share of GRPO groups has all-equal rewards")
    health_agreement_warn: float = option(
        0.6, "warn when the judge agrees with the rule scorer on less than this share of answers with a reference"
    )
    health_pair_accuracy_warn: float = option(
        0.7,
        "warn when, in pairs of a rule-right and a rule-wrong answer to one prompt, the judge rewards the right one "
        "more in less than this share",
    )
    health_fallback_warn: float = option(0.1, "warn when more than this share of rewards came from the rule fallback")

    group_relative: bool = option(
        False,
        "pairwise judge, no reference needed: each completion is compared with the other completions of its "
        "prompt (POST /judge_group) and rewarded by its mean win probability",
        env="JUDGE_GROUP_RELATIVE",
    )
    group_schedule: str = option(
        "all_pairs",
        "group_relative pairing: all_pairs (every pair once, N*(N-1)/2 comparisons per group, each judged in both "
        "orders by a pairwise judge) or k_random (each completion against group_k random siblings, at most N - 1)",
        env="JUDGE_GROUP_SCHEDULE",
    )
    group_k: int | None = option(None, "siblings per completion with group_schedule k_random", env="JUDGE_GROUP_K")
    group_seed: int = option(0, "seed of k_random's draw")
    group_size: int | None = option(
        None,
        "completions per prompt (the rollout's n): the per-sample callers (verl 0.9's reward loop) gather this "
        "many before sending a group",
        env="JUDGE_GROUP_SIZE",
    )
    group_window: float = option(
        2.0,
        "seconds a per-sample caller waits for the rest of its group after its first sample; then a partial "
        "group (2 or more) is sent",
    )

    def __post_init__(self):
        _check(
            isinstance(self.judge_url, str) and re.match(r"https?://[^/\s]+", self.judge_url or ""),
            "judge_url",
            f"must be an http(s) URL, got {self.judge_url!r}; set it in the config or in JUDGE_MODEL_URL",
        )
        for name in (
            "cache_size",
            "max_batch_size",
            "max_concurrent_requests",
            "circuit_breaker_threshold",
            "max_queue_size",
            "health_window",
        ):
            _check(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        _check(
            self.group_schedule in GROUP_SCHEDULES,
            "group_schedule",
            f"must be one of {GROUP_SCHEDULES}, got {self.group_schedule!r}",
        )
        _check(
            (self.group_k is not None) == (self.group_schedule == "k_random"),
            "group_k",
            f"is needed with group_schedule k_random and only then, got {self.group_k!r} with {self.group_schedule!r}",
        )
        _check(self.group_k is None or self.group_k >= 1, "group_k", f"must be >= 1, got {self.group_k}")
        _check(self.group_size is None or self.group_size >= 2, "group_size", f"must be >= 2, got {self.group_size}")
        _check(self.group_window >= 0, "group_window", f"must be >= 0, got {self.group_window}")
        _check(self.max_retries >= 0, "max_retries", f"must be >= 0, got {self.max_retries}")
        _check(self.batch_timeout >= 0, "batch_timeout", f"must be >= 0, got {self.batch_timeout}")
        _check(self.timeout > 0, "timeout", f"must be > 0, got {self.timeout}")
        _check(
            self.circuit_breaker_timeout >= 0,
            "circuit_breaker_timeout",
            f"must be >= 0, got {self.circuit_breaker_timeout}",
        )

    @classmethod
    def from_mapping(
        cls, config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> JudgeRewardConfig:
        """The typed config of a `reward.config` mapping, with env references and env variables applied."""
        config = dict(config or {})
        environ = os.environ if environ is None else environ
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(config) - set(fields))
        if unknown:
            raise ConfigError(f"unknown reward config keys {unknown}; valid keys: {sorted(fields)}")
        types = setting_types(cls)
        values = {}
        for name, spec in fields.items():
            raw, origin = _raw_value(name, config, spec.metadata["env"], environ)
            if raw is not None:
                values[name] = _cast(name, raw, types[name], origin)
        return cls(**values)

    @classmethod
    def help(cls) -> dict[str, str]:
        """One line of help per key (with its environment variable, if any)."""
        lines = {}
        for spec in dataclasses.fields(cls):
            env = spec.metadata["env"]
            lines[spec.name] = spec.metadata["help"] + (f" [env {env}]" if env else "") + f" (default {spec.default!r})"
        return lines

    def redacted(self) -> dict[str, Any]:
        """The settings, fit for a log line (the API key is not shown)."""
        values = dataclasses.asdict(self)
        for spec in dataclasses.fields(self):
            if spec.metadata["secret"] and values[spec.name]:
                values[spec.name] = "***"
        return values


def _check(condition, key: str, message: str):
    if not condition:
        raise ConfigError(f"reward config {key}: {message}")


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _raw_value(name: str, config: dict, env_name: str | None, environ: Mapping[str, str]) -> tuple[Any, str]:
    """(value, where it came from); value None when nothing sets the key."""
    value = config.get(name)
    if isinstance(value, str):
        value = _resolve_references(name, value, environ)
    if value is not None:
        return value, f"config key {name}"
    if env_name and environ.get(env_name, "") != "":
        return environ[env_name], f"env {env_name}"
    return None, "default"


def _resolve_references(name: str, value: str, environ: Mapping[str, str]) -> str | None:
    """`value` with `${VAR}` / `${VAR:-default}` replaced; None when a referenced variable is unset."""
    missing = []

    def substitute(match: re.Match) -> str:
        var, default = match.group(1), match.group(2)
        if environ.get(var, "") != "":
            return environ[var]
        if default is not None:
            return default
        missing.append(var)
        return ""

    resolved = _ENV_REFERENCE.sub(substitute, value)
    return None if missing else resolved


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _cast(name: str, raw: Any, kind: type, origin: str) -> Any:
    """`raw` as the field's type; bools and numbers are accepted as strings (env, YAML strings)."""
    try:
        if kind is bool:
            return _as_bool(raw)
        if kind is int:
            return _as_int(raw)
        if kind is float:
            return _as_float(raw)
        if not isinstance(raw, str):
            raise TypeError(f"expected text, got {type(raw).__name__}")
        return raw
    except (TypeError, ValueError) as err:
        raise ConfigError(f"reward config {name}: {err} (from {origin}: {raw!r})") from None


def _as_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
        return raw.strip().lower() in _TRUE
    raise ValueError(f"expected a boolean (true/false/1/0/yes/no), got {type(raw).__name__}")


def _as_int(raw: Any) -> int:
    if isinstance(raw, bool | float):
        raise TypeError(f"expected an integer, got {type(raw).__name__}")
    if isinstance(raw, str) and not re.fullmatch(r"\s*[-+]?\d+\s*", raw):
        raise ValueError("expected an integer")
    return int(raw)


def _as_float(raw: Any) -> float:
    if isinstance(raw, bool):
        raise TypeError("expected a number, got bool")
    return float(raw)
