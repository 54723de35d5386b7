"""The reward keys a verl version reads, and those it silently ignores.

verl 0.9.0 stopped migrating the top-level reward keys (`custom_reward_function.*`, `reward_model.*`,
`sandbox_fusion.*`) to `reward.*` (verl PR #6710; only the fully-async entry point still migrates them). They are
still declared, as null, so a config that sets them loads without a word and trains with verl's default rule
reward. verl 0.7.1 removed the `batch` reward manager. `ignored_reward_keys` names every such key of a config with
the key to use instead; a launcher refuses the config with them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import metadata
from typing import Any

LEGACY_KEYS_IGNORED_SINCE = (0, 9, 0)
BATCH_MANAGER_REMOVED_IN = (0, 7, 1)
# legacy key (or subtree) -> its key in verl >= 0.9; the most specific entry applies
CURRENT_KEYS = {
    "custom_reward_function": "reward.custom_reward_function",
    "reward_model": "reward.reward_model",
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.num_workers": "reward.num_workers",
    "reward_model.reward_kwargs": "reward.reward_kwargs",
    "reward_model.model.path": "reward.reward_model.model_path",
    "reward_model.reward_loop_source": "reward.reward_manager.source",
    "reward_model.reward_loop_module_path": "reward.reward_manager.module.path",
    "reward_model.reward_loop_class_name": "reward.reward_manager.module.name",
    "sandbox_fusion": "reward.sandbox_fusion",
}
JUDGE_REWARD_KEYS = (
    "reward.custom_reward_function.path=judge_rewards/verl_reward.py "
    "reward.custom_reward_function.name=compute_score_async "
    "+reward.custom_reward_function.reward_kwargs.<adapter key>=<value> "
    "reward.reward_manager.name=naive (or rate_limited)"
)


def installed_verl_version() -> str | None:
    """The version of the verl installed here; None when there is none."""
    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None


def ignored_reward_keys(config: Mapping[str, Any], verl_version: str) -> list[str]:
    """One line per reward setting of `config` (a plain nested mapping, e.g. OmegaConf.to_container) that verl
    `verl_version` ignores or no longer has, with the key to use instead; empty when there is none."""
    version = _release(verl_version)
    problems = []
    manager = (config.get("reward_model") or {}).get("reward_manager")
    if version >= BATCH_MANAGER_REMOVED_IN and manager == "batch":
        problems.append(
            f"reward_model.reward_manager=batch: verl {verl_version} has no `batch` reward manager (removed in 0.7.1); "
            "use reward.reward_manager.name=naive with the function compute_score_async"
        )
    if version >= LEGACY_KEYS_IGNORED_SINCE:
        for key, value in _set_leaves(config, ("custom_reward_function", "reward_model", "sandbox_fusion")):
            problems.append(
                f"{key}={value!r}: verl {verl_version} ignores it (not migrated since 0.9.0); use {_current_key(key)}"
            )
    return problems


def _release(version: str) -> tuple[int, int, int]:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if match is None:
        raise ValueError(f"not a verl version: {version!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _set_leaves(config: Mapping[str, Any], roots: tuple[str, ...]) -> list[tuple[str, Any]]:
    """(dotted key, value) of every non-null leaf under the top-level keys `roots`."""
    leaves = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for name, child in value.items():
                walk(f"{prefix}.{name}", child)
        elif value is not None:
            leaves.append((prefix, value))

    for root in roots:
        walk(root, config.get(root))
    return leaves


def _current_key(legacy_key: str) -> str:
    prefix = max((p for p in CURRENT_KEYS if legacy_key == p or legacy_key.startswith(p + ".")), key=len)
    return CURRENT_KEYS[prefix] + legacy_key[len(prefix) :]
