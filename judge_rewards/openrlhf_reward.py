"""OpenRLHF's local reward file: the judge server through the reward adapter (cache, batching, retries, circuit
breaker, tagged rule fallback).

    --reward.remote_url /path/to/judge_rewards/openrlhf_reward.py

OpenRLHF loads `reward_func(queries, prompts, labels)` from this file and calls it in a thread per sample; the
threads' calls share one adapter per process, which batches them. The judge settings come from the adapter's
environment variables (JUDGE_MODEL_URL, JUDGE_MODEL_API_KEY, JUDGE_MAX_BATCH_SIZE, JUDGE_MAX_CONCURRENT) and, for
any other key, JUDGE_REWARD_CONFIG: a JSON object of adapter settings, e.g. '{"fallback_to_rule": false}'.

Prompt and response are recovered from `queries` and `prompts` as plain text (judge_core.protocol.chat_markup),
`labels` are the reference answers. The answer has OpenRLHF's shape: `rewards` and `scores` (the same values), and
in `extra_logs` the numeric flags `judge_rule_fallback` and `judge_from_cache` per sample, and with a reward spec
in JUDGE_REWARD_CONFIG (`components`; OpenRLHF passes no data source: a row takes the `"*"` route) each component's
`component/<name>` value per sample (NaN: none). A sample that cannot be recovered, or that neither the judge nor
the rules can score, raises with the reason: OpenRLHF logs it and the sample gets no reward, never a made-up one.
"""

from __future__ import annotations

import json
import os
import threading

from judge_core.protocol.chat_markup import RolloutTextError, split_rollout
from judge_rewards.composed_reward import COMPONENT_PREFIX
from judge_rewards.judge_reward_adapter import SOURCE_CACHE, SOURCE_RULE_FALLBACK, JudgeRewardSystem
from judge_rewards.reward_config import ConfigError

CONFIG_ENV = "JUDGE_REWARD_CONFIG"

_system: JudgeRewardSystem | None = None
_system_lock = threading.Lock()


def reward_func(queries: list[str], prompts: list[str], labels: list | None = None) -> dict:
    labels = labels if labels is not None else [None] * len(queries)
    items = []
    for index, (query, prompt, label) in enumerate(zip(queries, prompts, labels, strict=True)):
        try:
            conversation, response = split_rollout(query, prompt)
        except RolloutTextError as err:
            raise RolloutTextError(f"judge reward: sample {index}: {err}") from None
        items.append({"prompt": conversation, "completion": response, "answer": label})
    rewards = reward_system().reward_batch(items)
    scores = [reward["reward"] for reward in rewards]
    extra_logs = {
        "judge_rule_fallback": [float(reward["source"] == SOURCE_RULE_FALLBACK) for reward in rewards],
        "judge_from_cache": [float(reward["source"] == SOURCE_CACHE) for reward in rewards],
    }
    for key in [key for key in (rewards[0] if rewards else {}) if key.startswith(COMPONENT_PREFIX)]:
        extra_logs[key] = [float(reward[key]) for reward in rewards]  # a reward spec's components (NaN: none)
    return {"rewards": scores, "scores": scores, "extra_logs": extra_logs}


def reward_system() -> JudgeRewardSystem:
    """This process's adapter, built at the first call from the environment."""
    global _system
    with _system_lock:
        if _system is None:
            _system = JudgeRewardSystem(_settings_from_environment())
        return _system


def _settings_from_environment() -> dict:
    raw = os.environ.get(CONFIG_ENV, "").strip()
    if not raw:
        return {}
    try:
        settings = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{CONFIG_ENV} is not JSON: {err}") from None
    if not isinstance(settings, dict):
        raise ConfigError(f"{CONFIG_ENV} must be a JSON object of adapter settings, got {type(settings).__name__}")
    return settings
