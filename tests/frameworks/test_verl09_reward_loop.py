"""judge_rewards.verl_reward.compute_score_async inside verl 0.9.1's own reward loop: the config composed from
verl's own YAML with the README's overrides, the function loaded by `load_reward_manager` /
`get_custom_reward_fn`, and the naive and rate_limited managers' `run_single` called for many samples at once,
against the real judge server (run in the main environment). Runs in the verl-0.9.1 environment
(frameworks/environments.py), with verl's own transformers and numpy pins."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import verl

from judge_rewards.reward_config import JudgeRewardConfig
from judge_rewards.reward_health import figures_of
from judge_rewards.verl_keys import ignored_reward_keys
from tests.conftest import REPO_ROOT
from tests.group_judge_server import GroupJudgeServer
from tests.reward_adapter_servers import start_rule_server
from tests.support.readme_blocks import readme_command

pytestmark = pytest.mark.e2e

SAMPLES = 48
HEALTH_KEYS = set(figures_of([]))
EXTRA_KEYS = {"score", "source", "from_rule_fallback", "from_cache"} | HEALTH_KEYS
COOKBOOK = "cookbooks/rl_with_judge_reward/README.md"
VERL09_COMMAND = "JUDGE_MODEL_URL=http://judge-host:8888 python -m verl.trainer.main_ppo"
KWARGS = "+reward.custom_reward_function.reward_kwargs."


def readme_overrides(adapter_settings: bool = False) -> list[str]:
    """The overrides of the cookbook's verl 0.9 command line: its adapter settings (`reward_kwargs`), or the rest
    (each test sets the adapter's)."""
    words = readme_command(COOKBOOK, VERL09_COMMAND)
    overrides = words[words.index("verl.trainer.main_ppo") + 1 :]
    return [override for override in overrides if override.startswith(KWARGS) == adapter_settings]


REWARD_OVERRIDES = readme_overrides()
LEGACY_OVERRIDES = [  # what that README showed for verl 0.6.1
    "custom_reward_function.path=judge_rewards/verl_reward.py",
    "custom_reward_function.name=compute_score",
    "+custom_reward_function.reward_kwargs.judge_url=http://127.0.0.1:8888",
    "reward_model.reward_manager=naive",
]


def verl_config(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def judge_overrides(url: str, **settings) -> list[str]:
    settings = {"judge_url": url, "max_batch_size": 8, "batch_timeout": 0.05, **settings}
    return [f"{KWARGS}{key}={value}" for key, value in settings.items()]


def adapters_of(manager) -> dict:
    """The adapters built by the reward file verl loaded from its path (a module of its own, apart from
    judge_rewards.verl_reward): verl wraps its function in a partial with the reward_kwargs."""
    function = manager.compute_score.args[0]
    return function.__globals__["_systems"]


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch):
    """The cookbook's reward file path is relative to the repository, where its command runs."""
    monkeypatch.chdir(REPO_ROOT)


def samples(tiny_tokenizer, count: int = SAMPLES) -> list:
    """One single-sample DataProto per rollout, shaped like those verl's reward loop hands `run_single`: sample i
    asks "What is i+1?" and answers i+1, right for even i and wrong (i+2) for odd i."""
    from verl import DataProto

    rows = []
    for i in range(count):
        answer = i + 1 if i % 2 == 0 else i + 2
        prompt = tiny_tokenizer(f"What is {i + 1}?").input_ids
        response = tiny_tokenizer(f"The answer is \\boxed{{{answer}}}").input_ids
        rows.append(
            DataProto.from_dict(
                tensors={
                    "prompts": torch.tensor([prompt]),
                    "responses": torch.tensor([response]),
                    "attention_mask": torch.ones(1, len(prompt) + len(response), dtype=torch.long),
                },
                non_tensors={
                    "data_source": np.array(["judge_policy"], dtype=object),
                    "reward_model": np.array([{"style": "model", "ground_truth": str(i + 1)}], dtype=object),
                    "extra_info": np.array([{"question": f"What is {i + 1}?", "index": i}], dtype=object),
                },
            )
        )
    return rows


def expected_scores(count: int = SAMPLES) -> list[float]:
    return [1.0 if i % 2 == 0 else 0.0 for i in range(count)]


def manager_overrides(name: str) -> list[str]:
    """The reward manager; rate_limited with the concurrency of a whole step (its default is one at a time)."""
    concurrency = ["+reward.max_concurrent=64", "+reward.timeout=120"] if name == "rate_limited" else []
    return [f"reward.reward_manager.name={name}", *concurrency]


def reward_manager(overrides: list[str], tiny_tokenizer, **manager_kwargs):
    from verl.trainer.ppo.reward import load_reward_manager

    return load_reward_manager(verl_config(overrides), tiny_tokenizer, **manager_kwargs)


def run_concurrently(manager, rows, after_each=None) -> list[dict]:
    """`run_single` for every row at once, on the manager's event loop (as verl's reward loop worker does)."""

    async def one(row):
        output = await manager.run_single(row)
        if after_each is not None:
            after_each()
        return output

    async def every():
        return await asyncio.gather(*(one(row) for row in rows))

    return manager.loop.run_until_complete(every())


@pytest.mark.parametrize("manager_name", ["naive", "rate_limited"])
def test_many_samples_at_once_are_judged_in_batches_without_a_thread_each(
    rule_judge_server, tiny_tokenizer, manager_name
):
    overrides = [
        *REWARD_OVERRIDES,
        f"reward.reward_manager.name={manager_name}",
        *judge_overrides(rule_judge_server.url),
    ]
    assert "reward.custom_reward_function.name=compute_score_async" in overrides
    if manager_name == "rate_limited":
        overrides += ["+reward.max_concurrent=64", "+reward.timeout=120"]
    manager = reward_manager(overrides, tiny_tokenizer)
    assert manager.is_async_reward_score  # awaited, not run in verl's thread pool
    outputs = run_concurrently(manager, samples(tiny_tokenizer))
    assert [output["reward_score"] for output in outputs] == expected_scores()
    assert all(set(output["reward_extra_info"]) == EXTRA_KEYS for output in outputs)
    assert {output["reward_extra_info"]["source"] for output in outputs} == {"judge"}
    (system,) = adapters_of(manager).values()
    assert system.get_metrics()["mean_batch_size"] > 2  # the samples were in flight together
    assert_health_reaches_validation_metrics([output["reward_extra_info"] for output in outputs])
    assert not [t.name for t in threading.enumerate() if t.name.startswith("JudgeReward-batch")]


def assert_health_reaches_validation_metrics(extras: list[dict]) -> None:
    """verl 0.9's trainer logs reward extra info through validation: its own code turns the samples' extra info
    into val-aux metrics (the figures a sample carries are those of at most 32 rewards before it)."""
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    infos = {key: [extra[key] for extra in extras] for key in HEALTH_KEYS}
    metrics = process_validation_metrics(["judge_policy"] * len(extras), [str(i) for i in range(len(extras))], infos)
    assert set(metrics["judge_policy"]) == HEALTH_KEYS
    assert extras[-1]["health_window"] >= 32 and extras[-1]["health_judge_rule_agreement"] == 1.0


def group_samples(tiny_tokenizer, prompts: int, group_size: int) -> list:
    """`prompts` groups of `group_size` single-sample DataProtos, interleaved as verl may finish them: the answer of
    sample j of a group is j+1 characters long."""
    from verl import DataProto

    rows = []
    for j in range(group_size):
        for p in range(prompts):
            question, response = f"Prompt {p}", "x" * (j + 1)
            prompt_ids, response_ids = tiny_tokenizer(question).input_ids, tiny_tokenizer(response).input_ids
            rows.append(
                DataProto.from_dict(
                    tensors={
                        "prompts": torch.tensor([prompt_ids]),
                        "responses": torch.tensor([response_ids]),
                        "attention_mask": torch.ones(1, len(prompt_ids) + len(response_ids), dtype=torch.long),
                    },
                    non_tensors={
                        "data_source": np.array(["judge_policy"], dtype=object),
                        "reward_model": np.array([{"style": "model", "ground_truth": ""}], dtype=object),
                        "extra_info": np.array([{"question": question, "index": j}], dtype=object),
                    },
                )
            )
    return rows


@pytest.mark.parametrize("manager_name", ["naive", "rate_limited"])
def test_per_sample_calls_are_gathered_into_group_relative_rewards(tiny_tokenizer, manager_name):
    server = GroupJudgeServer("longer")
    try:
        settings = {"group_relative": "true", "group_size": 4, "group_window": 30}
        overrides = [*REWARD_OVERRIDES, *manager_overrides(manager_name), *judge_overrides(server.url, **settings)]
        outputs = run_concurrently(reward_manager(overrides, tiny_tokenizer), group_samples(tiny_tokenizer, 3, 4))
    finally:
        server.close()
    # sample j of 4 beats j siblings (longer wins): mean win probability j/3, whatever its prompt
    assert [output["reward_score"] for output in outputs] == pytest.approx([j / 3 for j in range(4) for _ in range(3)])
    assert all(output["reward_extra_info"]["comparisons"] == 3.0 for output in outputs)
    assert sorted(len(body["completions"]) for body in server.bodies) == [4, 4, 4]  # one request per full group


def test_the_keyword_arguments_verl_adds_itself_are_not_taken_for_adapter_settings(rule_judge_server, tiny_tokenizer):
    overrides = [*REWARD_OVERRIDES, *judge_overrides(rule_judge_server.url)]
    # verl passes reward_router_address and reward_model_tokenizer when it hosts a reward model itself
    verl_arguments = {"reward_router_address": "127.0.0.1:1", "reward_model_tokenizer": tiny_tokenizer}
    manager = reward_manager(overrides, tiny_tokenizer, **verl_arguments)
    outputs = run_concurrently(manager, samples(tiny_tokenizer, 4))
    assert [output["reward_score"] for output in outputs] == expected_scores(4)


@pytest.mark.parametrize("manager_name", ["naive", "rate_limited"])
def test_a_judge_killed_mid_run_loses_no_reward_and_tags_each(tmp_path, tiny_tokenizer, manager_name):
    server = start_rule_server(tmp_path / "server.log")
    settings = {"max_batch_size": 4, "max_concurrent_requests": 1, "max_retries": 1, "timeout": 5}
    overrides = [*REWARD_OVERRIDES, *judge_overrides(server.url, **settings), *manager_overrides(manager_name)]
    manager = reward_manager(overrides, tiny_tokenizer)
    finished = []

    def kill_after_eight():
        finished.append(1)
        if len(finished) == 8:
            server.kill()

    try:
        outputs = run_concurrently(manager, samples(tiny_tokenizer), after_each=kill_after_eight)
    finally:
        server.stop()
    assert len(outputs) == SAMPLES
    assert [output["reward_score"] for output in outputs] == expected_scores()  # the rules agree with the rule judge
    extras = [output["reward_extra_info"] for output in outputs]
    assert all(set(extra) == EXTRA_KEYS for extra in extras)
    sources = [extra["source"] for extra in extras]
    assert set(sources) == {"judge", "rule_fallback"}
    assert all(extra["from_rule_fallback"] == float(extra["source"] == "rule_fallback") for extra in extras)


@pytest.mark.parametrize("manager_name", ["naive", "rate_limited"])
def test_a_reward_spec_file_mixes_a_judge_and_a_rule_for_each_sample(
    rule_judge_server, tiny_tokenizer, tmp_path, manager_name
):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "components: {judge: {type: judge}, arithmetic: {type: rule}}\n"
        "specs: {math: {components: {judge: 0.25, arithmetic: 0.75}}}\n"
        "routes: {judge_policy: math}\n"
    )
    settings = judge_overrides(rule_judge_server.url, reward_spec=spec)
    manager = reward_manager([*REWARD_OVERRIDES, *settings, *manager_overrides(manager_name)], tiny_tokenizer)
    outputs = run_concurrently(manager, samples(tiny_tokenizer))
    assert [output["reward_score"] for output in outputs] == expected_scores()  # judge and rule agree here
    extras = [output["reward_extra_info"] for output in outputs]
    assert {extra["spec"] for extra in extras} == {"math"} and all(e["failed_components"] == 0.0 for e in extras)
    assert [extra["component/arithmetic"] for extra in extras] == expected_scores()
    assert {(extra["component/judge/source"], extra["component/arithmetic/source"]) for extra in extras} == {
        ("judge", "rule")
    }
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    keys = ["component/judge", "component/arithmetic"]
    infos = {key: [extra[key] for extra in extras] for key in keys}
    metrics = process_validation_metrics(["judge_policy"] * SAMPLES, [str(i) for i in range(SAMPLES)], infos)
    assert metrics["judge_policy"]["component/arithmetic"]["mean@1"] == 0.5


def test_the_legacy_keys_are_silently_ignored_by_verl_and_refused_by_our_check():
    legacy = verl_config(LEGACY_OVERRIDES)
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    assert get_custom_reward_fn(legacy) is None  # verl would train with its default reward, without a word
    problems = ignored_reward_keys(OmegaConf.to_container(legacy), verl.__version__)
    assert "; ".join(problems).count("ignores it") == 4
    assert any("use reward.custom_reward_function.path" in problem for problem in problems)
    assert any("use reward.reward_manager.name" in problem for problem in problems)
    assert any("use reward.custom_reward_function.reward_kwargs.judge_url" in problem for problem in problems)

    current = verl_config([*REWARD_OVERRIDES, *readme_overrides(adapter_settings=True)])
    assert get_custom_reward_fn(current) is not None
    settings = current.reward.custom_reward_function.reward_kwargs
    assert JudgeRewardConfig.from_mapping({**settings, "judge_url": "http://127.0.0.1:8888"}).max_batch_size == 16
    assert ignored_reward_keys(OmegaConf.to_container(current), verl.__version__) == []
