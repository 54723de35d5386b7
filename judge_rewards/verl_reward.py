"""verl custom reward functions that score policy rollouts with a running judge server.

verl 0.9.x (the reward loop; `naive` or `rate_limited` manager, one awaited call per sample):

    reward.custom_reward_function.path=judge_rewards/verl_reward.py
    reward.custom_reward_function.name=compute_score_async
    +reward.custom_reward_function.reward_kwargs.judge_url=http://judge-host:8888   # optional, any adapter key

verl 0.6.1 (top-level keys, which verl 0.9 ignores: judge_rewards/verl_keys.py):

    custom_reward_function.path=judge_rewards/verl_reward.py
    custom_reward_function.name=compute_score          # reward_model.reward_manager=naive (one call per sample)
    custom_reward_function.name=compute_score_batch    # reward_model.reward_manager=batch (one call per batch)
    +custom_reward_function.reward_kwargs.judge_url=http://judge-host:8888   # optional, any adapter key

The adapter settings come from `reward_kwargs` (any JudgeRewardConfig key) and the adapter's
environment variables (JUDGE_MODEL_URL, JUDGE_MODEL_API_KEY, JUDGE_MAX_BATCH_SIZE, JUDGE_MAX_CONCURRENT).

verl hands a reward function the response text and `reward_model.ground_truth`, not the prompt: the
policy dataset must carry the prompt in `extra_info.question` (the user's text, or the list of
{role, content} messages; a content may be OpenAI-style parts with images as data URLs, which
judge_core.protocol.content.with_images builds from a multimodal row's `<image>` text and `images`).
`ground_truth` is sent as the reference answer (None when the row has none), `extra_info.answer_type` (optional)
as its answer type and `extra_info.rubric` (optional: text or a list of criteria) as the rubric of a judge served
with a template that reads one. Other extra_info keys (verl 0.9 adds num_turns and rollout_reward_scores) are not
read.

Group-relative pairwise rewards (a pairwise judge, no reference answer needed): `reward_kwargs.group_relative=true`
(or JUDGE_GROUP_RELATIVE=true). compute_score_batch groups a step's samples by prompt (extra_info.question) and
sends each group to POST /judge_group; the per-sample functions cannot see a group: compute_score_async gathers a
prompt's samples (`reward_kwargs.group_size` = actor_rollout_ref.rollout.n, waiting at most `group_window` seconds
after the first), and verl 0.6.1's naive compute_score is refused. Validation must then generate 2 or more answers
per prompt (actor_rollout_ref.rollout.val_kwargs.n), or a prompt's lone answer is an error naming it.

Every sample's dict has the same keys: score, source (judge | cache | rule_fallback), and the
numeric flags from_rule_fallback and from_cache, in group-relative mode also comparisons and failed_comparisons,
and the adapter's reward-health figures (health_*: judge_rewards/reward_health.py; the same for every sample of a
batch-manager call, those of at most 32 rewards ago for a per-sample call). verl 0.9 reads the keys of a batch's
first sample. Where they show up: verl (0.6.1 and 0.9) writes them to every row of `trainer.rollout_data_dir` /
`validation_data_dir` JSONL, and logs their validation averages as `val-aux/<data_source>/<key>/mean@N`; its
training metrics (critic/score/mean) take no reward extra info.
With a reward spec (`components`, judge_rewards/reward_spec.py) every sample also has `component/<name>` (its value,
NaN where it has none), `component/<name>/source`, `spec` and `failed_components`, and the row's data_source picks
its spec through `routes` (with `route_column` other than data_source: the row's `extra_info.<route_column>`,
e.g. `subset`); the health figures add `component/<name>/health_judge_rule_agreement` and kin.
verl may pickle these functions into Ray workers, so the adapter is built lazily, once per process
and settings, at the first call; nothing is built at import.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from judge_rewards.composed_reward import COMPONENT_PREFIX
from judge_rewards.judge_reward_adapter import SOURCE_CACHE, SOURCE_RULE_FALLBACK, JudgeRewardSystem

QUESTION_KEY = "question"
RUBRIC_KEY = "rubric"
NO_COMPONENT_SOURCE = "none"  # a component's source on a row it did not score (not in its spec, or left out)
ANSWER_TYPE_KEY = "answer_type"

_systems: dict[tuple, JudgeRewardSystem] = {}
_systems_lock = threading.Lock()


# The keyword arguments verl 0.9's reward loop adds itself when it hosts a reward model: not adapter settings.
VERL_CALL_KEYS = ("reward_router_address", "reward_model_tokenizer")


async def compute_score_async(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **reward_kwargs
) -> dict:
    """verl 0.9's per-sample call (naive and rate_limited reward managers), awaited in the reward loop: the
    sample's judge request joins the adapter's batches without holding a thread while it waits."""
    judge_config = {name: value for name, value in reward_kwargs.items() if name not in VERL_CALL_KEYS}
    system = reward_system(judge_config)
    item = _judge_item(data_source, solution_str, ground_truth, extra_info)
    reward = await system.areward(**item, data_source=_route(system.route_column, data_source, extra_info))
    return _verl_score(reward, system.health_figures(fresh=False))


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **judge_config
) -> dict:
    """verl 0.6.1's naive reward manager's per-sample call."""
    system = reward_system(judge_config)
    if system.config.group_relative:
        names = system.group_judge_components  # a reward spec: name them, not a key the user never set
        what = f"group_judge component {', '.join(map(repr, names))}" if names else "group_relative judge reward"
        raise ValueError(
            f"{what}: verl's naive reward manager scores one sample at a time and a "
            "group-relative reward needs the prompt's whole group: use reward_model.reward_manager=batch with "
            "custom_reward_function.name=compute_score_batch"
        )
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **judge_config)[0]


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict | None],
    **judge_config,
) -> list[dict]:
    """verl 0.6.1's batch reward manager's call: all samples of a step go to the judge at once."""
    system = reward_system(judge_config)
    items = [
        _judge_item(source, solution, truth, extra, route_column=system.route_column)
        for source, solution, truth, extra in zip(data_sources, solution_strs, ground_truths, extra_infos, strict=True)
    ]
    rewards = system.reward_batch(items)
    health = system.health_figures()
    return [_verl_score(reward, health) for reward in rewards]


def reward_system(judge_config: dict) -> JudgeRewardSystem:
    """This process's adapter for these settings (built at first use; a forked child builds its own)."""
    key = (os.getpid(), tuple(sorted((name, repr(value)) for name, value in judge_config.items())))
    with _systems_lock:
        if key not in _systems:
            _systems[key] = JudgeRewardSystem(judge_config)
        return _systems[key]


def _judge_item(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None, route_column: str | None = None
) -> dict:
    question = _plain((extra_info or {}).get(QUESTION_KEY))
    if not question:
        raise ValueError(
            f"judge reward: the row of data_source {data_source!r} has no extra_info.{QUESTION_KEY}. verl passes a "
            f"reward function the response and ground truth but not the prompt, so the policy dataset must store "
            f"the prompt (text or a list of {{role, content}} messages) in extra_info.{QUESTION_KEY}; "
            f"see judge_rewards/README.md"
        )
    item = {
        "prompt": question,
        "completion": solution_str,
        "answer": ground_truth,
        "answer_type": (extra_info or {}).get(ANSWER_TYPE_KEY),
    }
    if (extra_info or {}).get(RUBRIC_KEY) is not None:  # for a judge whose template reads a rubric
        item[RUBRIC_KEY] = extra_info[RUBRIC_KEY]
    if route_column is None:
        return item
    return {**item, "data_source": _route(route_column, data_source, extra_info)}


def _plain(value: Any) -> Any:
    """A value read from parquet as JSON would hold it: a message list arrives as a numpy array, content parts as
    arrays of dicts, each part with the other kinds' keys set to None (parquet stores one struct for them all)."""
    if hasattr(value, "tolist") and not isinstance(value, str):
        value = value.tolist()
    if isinstance(value, list):
        return [_plain(element) for element in value]
    if isinstance(value, dict):
        return {key: _plain(element) for key, element in value.items() if element is not None}
    return value


def _route(route_column: str | None, data_source: str, extra_info: dict | None) -> Any:
    """The value that picks a row's reward spec: its data_source, or its extra_info.<route_column>."""
    if route_column in (None, "data_source"):
        return data_source
    if route_column not in (extra_info or {}):
        raise ValueError(
            f"judge reward: the reward spec routes by route_column {route_column!r}, and a row of data_source "
            f"{data_source!r} has no extra_info.{route_column} (its keys: {sorted(extra_info or {})})"
        )
    return extra_info[route_column]


def _verl_score(reward: dict, health: dict[str, float]) -> dict:
    score = {
        **health,
        "score": reward["reward"],
        "source": reward["source"],
        "from_rule_fallback": float(reward["source"] == SOURCE_RULE_FALLBACK),
        "from_cache": float(reward["source"] == SOURCE_CACHE),
    }
    if "comparisons" in reward:  # group-relative mode: every sample of it has both counts
        score["comparisons"] = float(reward["comparisons"])
        score["failed_comparisons"] = float(reward["failed"])
    if "components" in reward:  # a reward spec: each component's value (NaN: none) and source, same keys every row
        for key, value in reward.items():
            if key.startswith(COMPONENT_PREFIX):
                name = key[len(COMPONENT_PREFIX) :]
                component = reward["components"].get(name)
                score[key] = float(value)
                score[f"{key}/source"] = (component or {}).get("source") or NO_COMPONENT_SOURCE
        score["spec"] = reward["spec"]
        score["failed_components"] = float(len(reward["failed"]))
    return score
