"""judge_rewards.verl_keys: which reward keys each verl version ignores (verl 0.9.1's own behaviour is checked in
tests/frameworks/test_verl09_reward_loop.py, in its environment)."""

from __future__ import annotations

import pytest

from judge_rewards.verl_keys import ignored_reward_keys

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
