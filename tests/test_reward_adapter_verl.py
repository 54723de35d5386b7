"""judge_rewards.verl_reward inside verl 0.6.1's own reward managers (naive and batch), loaded the way
verl loads a custom reward function, scoring tokenized rollouts with the real judge server."""

from __future__ import annotations

import functools
import json
import multiprocessing
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from judge_rewards import verl_reward
from judge_rewards.reward_health import figures_of
from tests.conftest import REPO_ROOT
from tests.group_judge_server import GroupJudgeServer
from tests.support.readme_blocks import readme_block
from tests.support.servers import free_port

pytestmark = pytest.mark.e2e

ROLLOUTS = [  # (question, response, ground truth, expected rule-judge score)
    ("What is 2+2?", "2+2 makes \\boxed{4}", "4", 1.0),
    ("What is 3*3?", "I think it is \\boxed{6}", "9", 0.0),
    ("Is 7 prime?", "Yes, 7 has no divisors but 1 and itself.", "yes", 1.0),
    ("Pick the even number: (A) 3 (B) 8", "The answer is (B).", "B", 1.0),
]
HEALTH_KEYS = set(figures_of([]))
# One answer's reward as the rl_with_judge_reward cookbook shows it: its keys, and the health figures beside them.
SHOWN_REWARD = json.loads(readme_block("cookbooks/rl_with_judge_reward/README.md", '{"score": ').text)
EXTRA_KEYS = set(SHOWN_REWARD) | HEALTH_KEYS


def rollout_batch(tiny_tokenizer, rollouts=ROLLOUTS):
    """A DataProto shaped like the one verl's trainer hands its reward manager."""
    from verl import DataProto

    prompts = [tiny_tokenizer(q).input_ids for q, *_ in rollouts]
    responses = [tiny_tokenizer(r).input_ids for _, r, *_ in rollouts]
    prompt_len, response_len = max(map(len, prompts)), max(map(len, responses))
    pad = tiny_tokenizer.pad_token_id
    prompt_ids = torch.tensor([[pad] * (prompt_len - len(p)) + p for p in prompts])
    response_ids = torch.tensor([r + [pad] * (response_len - len(r)) for r in responses])
    mask = torch.tensor(
        [
            [0] * (prompt_len - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (response_len - len(r))
            for p, r in zip(prompts, responses, strict=True)
        ]
    )
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "attention_mask": mask,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
        },
        non_tensors={
            "data_source": np.array(["judge_policy"] * len(rollouts), dtype=object),
            "reward_model": np.array(
                [{"style": "model", "ground_truth": gt} for _, _, gt, _ in rollouts], dtype=object
            ),
            "extra_info": np.array([{"question": q, "index": i} for i, (q, *_) in enumerate(rollouts)], dtype=object),
        },
    )


def verl_reward_manager(tiny_tokenizer, manager: str, function: str, judge_url: str, **reward_kwargs):
    """The reward manager verl builds from `custom_reward_function` and `reward_model.reward_manager`."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import load_reward_manager

    config = OmegaConf.create(
        {
            "custom_reward_function": {
                "path": str(REPO_ROOT / "judge_rewards" / "verl_reward.py"),
                "name": function,
                "reward_kwargs": {"judge_url": judge_url, "max_retries": 0, **reward_kwargs},
            },
            "reward_model": {"reward_manager": manager},
            "data": {"reward_fn_key": "data_source"},
        }
    )
    sys.modules.pop("custom_module", None)  # verl caches the loaded file under this name
    return load_reward_manager(config, tiny_tokenizer, num_examine=0)


@pytest.mark.parametrize("manager, function", [("naive", "compute_score"), ("batch", "compute_score_batch")])
def test_verl_reward_managers_score_rollouts_with_the_judge(rule_judge_server, tiny_tokenizer, manager, function):
    data = rollout_batch(tiny_tokenizer)
    output = verl_reward_manager(tiny_tokenizer, manager, function, rule_judge_server.url)(data, return_dict=True)
    last_token = data.batch["attention_mask"][:, data.batch["prompts"].shape[1] :].sum(-1) - 1
    scores = output["reward_tensor"][torch.arange(len(ROLLOUTS)), last_token]
    assert scores.tolist() == [expected for *_, expected in ROLLOUTS]
    extra = output["reward_extra_info"]
    assert set(extra) == EXTRA_KEYS and all(len(values) == len(ROLLOUTS) for values in extra.values())
    assert set(extra["source"]) <= {"judge", "cache"} and set(extra["from_rule_fallback"]) == {0.0}


def test_rule_fallback_is_flagged_for_verl_metrics(tiny_tokenizer):
    data = rollout_batch(tiny_tokenizer)
    output = verl_reward_manager(tiny_tokenizer, "batch", "compute_score_batch", f"http://127.0.0.1:{free_port()}")(
        data, return_dict=True
    )
    extra = output["reward_extra_info"]
    assert extra["source"] == ["rule_fallback"] * len(ROLLOUTS) and extra["from_rule_fallback"] == [1.0] * len(ROLLOUTS)
    assert extra["score"] == [expected for *_, expected in ROLLOUTS]


def test_the_health_figures_reach_verls_validation_metrics_and_rollout_dump(
    rule_judge_server, tiny_tokenizer, tmp_path
):
    """verl 0.6.1's trainer logs reward extra info only through validation (val-aux/...) and its JSONL dumps:
    its own code turns this batch's extra info into both."""
    from types import SimpleNamespace

    from verl.trainer.ppo.metric_utils import process_validation_metrics
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    data = rollout_batch(tiny_tokenizer)
    manager = verl_reward_manager(tiny_tokenizer, "batch", "compute_score_batch", rule_judge_server.url)
    extra = manager(data, return_dict=True)["reward_extra_info"]
    assert extra["health_window"] == [float(len(ROLLOUTS))] * len(ROLLOUTS)
    assert extra["health_judge_rule_agreement"] == [1.0] * len(ROLLOUTS)  # the rule judge agrees with the rules
    sources = ["judge_policy"] * len(ROLLOUTS)
    metrics = process_validation_metrics(sources, [str(i) for i in range(len(ROLLOUTS))], extra)["judge_policy"]
    assert metrics["health_judge_rule_agreement"]["mean@1"] == 1.0
    assert metrics["health_fallback_share"]["mean@1"] == 0.0
    dumper = SimpleNamespace(global_steps=1)
    RayPPOTrainer._dump_generations(
        dumper,
        ["q"] * len(ROLLOUTS),
        ["a"] * len(ROLLOUTS),
        [0] * len(ROLLOUTS),
        [0.0] * len(ROLLOUTS),
        extra,
        str(tmp_path),
    )
    row = json.loads((tmp_path / "1.jsonl").read_text().splitlines()[0])
    assert set(row) >= HEALTH_KEYS and row["health_judge_rule_agreement"] == 1.0


def test_a_row_without_the_question_is_a_clear_error(rule_judge_server):
    with pytest.raises(ValueError, match=r"has no extra_info.question.*policy dataset must store the prompt"):
        verl_reward.compute_score("judge_policy", "\\boxed{4}", "4", {"index": 0}, judge_url=rule_judge_server.url)


def test_message_list_questions_from_parquet_are_accepted(rule_judge_server):
    question = np.array([{"role": "user", "content": "What is 2+2?"}], dtype=object)
    result = verl_reward.compute_score(
        "judge_policy", "\\boxed{4}", "4", {"question": question}, judge_url=rule_judge_server.url
    )
    assert result["score"] == 1.0 and result["source"] in ("judge", "cache")


def test_import_builds_no_client():
    code = (
        "import judge_rewards.verl_reward as v, sys; assert not v._systems; "
        "assert 'JudgeReward-client' not in [t.name for t in __import__('threading').enumerate()]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT)


SAMPLE = ("judge_policy", "\\boxed{4}", "4", {"question": "What is 2+2?"})


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_pickled_reward_function_builds_its_own_client_per_process(rule_judge_server, start_method):
    score_fn = functools.partial(verl_reward.compute_score, judge_url=rule_judge_server.url)
    assert score_fn(*SAMPLE)["source"] in ("judge", "cache")  # this process now holds a client
    pickle.dumps(score_fn)
    with multiprocessing.get_context(start_method).Pool(1) as pool:
        child = pool.apply(score_fn, SAMPLE)
    assert child["score"] == 1.0 and child["source"] == "judge"  # a fresh client (and cache) in the child


GROUP_ROLLOUTS = [  # (question, response, ground truth, expected reward from the planted "longer" judge)
    ("Say hi.", "hi", "", 0.0),
    ("Name a colour.", "blue", "", 0.5),
    ("Say hi.", "hello there", "", 1.0),
    ("Name a colour.", "teal", "", 0.5),
    ("Say hi.", "hey!", "", 0.5),
]


def test_verl_batch_manager_gets_group_relative_rewards_by_prompt(tiny_tokenizer):
    server = GroupJudgeServer("longer")
    try:
        data = rollout_batch(tiny_tokenizer, GROUP_ROLLOUTS)
        manager = verl_reward_manager(tiny_tokenizer, "batch", "compute_score_batch", server.url, group_relative=True)
        output = manager(data, return_dict=True)
    finally:
        server.close()
    last_token = data.batch["attention_mask"][:, data.batch["prompts"].shape[1] :].sum(-1) - 1
    scores = output["reward_tensor"][torch.arange(len(GROUP_ROLLOUTS)), last_token]
    assert scores.tolist() == pytest.approx([expected for *_, expected in GROUP_ROLLOUTS])
    extra = output["reward_extra_info"]
    assert set(extra) == EXTRA_KEYS | {"comparisons", "failed_comparisons"}
    assert extra["comparisons"] == [2.0, 1.0, 2.0, 1.0, 2.0] and set(extra["failed_comparisons"]) == {0.0}
    assert sorted((b["prompt"], len(b["completions"])) for b in server.bodies) == [
        ("Name a colour.", 2),
        ("Say hi.", 3),
    ]


def test_verl_naive_manager_refuses_the_group_relative_mode(tiny_tokenizer):
    manager = verl_reward_manager(
        tiny_tokenizer, "naive", "compute_score", f"http://127.0.0.1:{free_port()}", group_relative=True
    )
    with pytest.raises(ValueError, match="reward_manager=batch"):
        manager(rollout_batch(tiny_tokenizer, GROUP_ROLLOUTS), return_dict=True)
