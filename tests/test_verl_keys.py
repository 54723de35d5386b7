"""judge_rewards.verl_keys: which reward keys each verl version ignores (verl 0.9.1's own behaviour is checked in
tests/frameworks/test_verl09_reward_loop.py, in its environment)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from judge_rewards.verl_keys import ignored_reward_keys
from tests.conftest import REPO_ROOT
from tests.support.readme_blocks import readme_command

LEGACY = {
    "custom_reward_function": {"path": "judge_rewards/verl_reward.py", "name": "compute_score_batch"},
    "reward_model": {"reward_manager": "batch", "enable": None, "model": {"path": "judge"}},
    "reward": {"custom_reward_function": {"path": None}},
}


def test_verl_0_6_reads_the_top_level_keys():
    assert ignored_reward_keys(LEGACY, "0.6.1") == []


def test_verl_0_8_migrates_them_but_has_no_batch_manager():
    (problem,) = ignored_reward_keys(LEGACY, "0.8.0")
    assert problem.startswith("reward_model.reward_manager=batch: verl 0.8.0 has no `batch` reward manager")


@pytest.mark.parametrize("version", ["0.9.0", "0.9.1", "0.10.0.dev0"])
def test_from_verl_0_9_every_set_legacy_key_is_named_with_its_replacement(version):
    problems = ignored_reward_keys(LEGACY, version)
    ignored = [problem for problem in problems if "ignores it" in problem]
    assert [problem.split("=", 1)[0] for problem in ignored] == [
        "custom_reward_function.path",
        "custom_reward_function.name",
        "reward_model.reward_manager",
        "reward_model.model.path",
    ]  # reward_model.enable is null: not set, nothing to say
    assert ignored[2].endswith("use reward.reward_manager.name")
    assert ignored[3].endswith("use reward.reward_model.model_path")
    assert len(problems) == len(ignored) + 1  # and the batch manager


def test_a_config_in_verl_0_9_keys_passes():
    current = {"reward": {"custom_reward_function": {"path": "x.py", "name": "compute_score_async"}}}
    assert ignored_reward_keys({**current, "custom_reward_function": {"path": None}}, "0.9.1") == []


def test_a_version_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a verl version: 'main'"):
        ignored_reward_keys(LEGACY, "main")


def overrides_config(words: list[str]) -> dict:
    """The nested config that Hydra overrides (`key.path=value`, `+` to add) set, values as text."""
    config: dict = {}
    for word in (word.lstrip("+") for word in words if "=" in word):
        key, value = word.split("=", 1)
        *parents, leaf = key.split(".")
        node = config
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return config


def verl_overrides(command: list[str]) -> dict:
    """The config that a `python -m verl.trainer.main_ppo` command line's overrides set."""
    return overrides_config(command[command.index("verl.trainer.main_ppo") + 1 :])


def test_the_readmes_verl_lines_set_the_keys_their_verl_reads():
    """judge_rewards/README.md's two verl fragments: the verl 0.9 one sets what the cookbook's verl 0.9 command sets
    (which tests/frameworks/test_verl09_reward_loop.py runs in verl 0.9.1) and nothing verl 0.9.1 ignores; the
    verl 0.6.1 one is what the policy launcher's config gives (training/configs/policy_grpo.yaml, batch manager),
    keys that verl 0.9.1 would ignore, every one."""
    v09 = verl_overrides(readme_command("judge_rewards/README.md", "python -m verl.trainer.main_ppo ... \\\n  reward."))
    cookbook = verl_overrides(
        readme_command("cookbooks/rl_with_judge_reward/README.md", "JUDGE_MODEL_URL=http://judge-host:8888 python -m")
    )
    assert ignored_reward_keys(v09, "0.9.1") == []
    function = v09["reward"]["custom_reward_function"]
    assert (function["path"], function["name"]) == ("judge_rewards/verl_reward.py", "compute_score_async")
    assert {**function, "reward_kwargs": None} == {
        **cookbook["reward"]["custom_reward_function"],
        "reward_kwargs": None,
    }
    assert v09["reward"]["reward_manager"] == cookbook["reward"]["reward_manager"] == {"name": "naive"}

    v06 = verl_overrides(
        readme_command("judge_rewards/README.md", "python -m verl.trainer.main_ppo ... \\\n  custom_reward_function.")
    )
    policy = OmegaConf.load(REPO_ROOT / "training" / "configs" / "policy_grpo.yaml")
    manager = v06["reward_model"]["reward_manager"]
    assert v06["custom_reward_function"]["path"] == policy.custom_reward_function.path
    assert (manager, v06["custom_reward_function"]["name"]) == ("batch", policy.launch.reward_functions[manager])
    assert ignored_reward_keys(v06, "0.6.1") == []
    ignored = [problem.split("=", 1)[0] for problem in ignored_reward_keys(v06, "0.9.1") if "ignores it" in problem]
    assert ignored == [
        "custom_reward_function.path",
        "custom_reward_function.name",
        "custom_reward_function.reward_kwargs.max_batch_size",
        "reward_model.reward_manager",
    ]
