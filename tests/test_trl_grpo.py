"""judge_rewards.trl_reward.JudgeReward as a reward function of TRL's own GRPOTrainer: one real training step
on CPU with the tiny model, its completions judged by the real judge server. Runs in the main environment
(TRL 0.26.2) and, unchanged, in the trl-1.16.0 framework environment (frameworks/environments.py)."""

from __future__ import annotations

import pytest

from judge_rewards.trl_reward import JudgeReward
from tests.group_judge_server import GroupJudgeServer
from tests.support.servers import free_port

pytestmark = pytest.mark.e2e

GENERATIONS = 4
QUESTIONS = [("What is 2+2?", "4"), ("What is 3*3?", "9")]


def dataset(conversational: bool):
    from datasets import Dataset

    rows = [
        {"prompt": [{"role": "user", "content": question}] if conversational else question, "reference": answer}
        for question, answer in QUESTIONS
    ]
    return Dataset.from_list(rows)


def grpo_step(model_dir, train_dataset, reward, output_dir):
    """One GRPOTrainer step on CPU: 2 prompts x GENERATIONS completions of 8 tokens, judged by `reward`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.model_input_names = ["input_ids", "attention_mask"]  # generate() refuses the tiny's token_type_ids
    args = GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        per_device_train_batch_size=len(QUESTIONS) * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=8,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=[reward],
        args=args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer.state.log_history[0]


@pytest.mark.parametrize("conversational", [False, True], ids=["plain", "conversational"])
def test_a_grpo_step_is_rewarded_by_the_judge(rule_judge_server, tiny_model_dir, tmp_path, conversational):
    reward = JudgeReward({"judge_url": rule_judge_server.url, "max_retries": 0}, answer_column="reference")
    calls = []
    original = reward.system.reward_batch

    def recording(items, **kwargs):
        calls.append(list(items))
        return original(calls[-1], **kwargs)

    reward.system.reward_batch = recording
    logs = grpo_step(tiny_model_dir, dataset(conversational), reward, tmp_path)
    reward.close()
    (batch,) = calls  # the whole batch at once
    assert len(batch) == len(QUESTIONS) * GENERATIONS
    assert {item["answer"] for item in batch} == {answer for _, answer in QUESTIONS}
    if conversational:
        assert all(item["prompt"][-1]["role"] == "user" for item in batch)
    assert not any("<|im_start|>" in str(item["prompt"]) for item in batch)  # judged as text, not chat markup
    metrics = reward.system.get_metrics()
    assert metrics["judge_successes"] + metrics["cache_hits"] == len(batch) and metrics["rule_fallbacks"] == 0
    assert logs["rewards/judge/mean"] >= 0.0  # TRL got a number for every completion
    if trl_logs_metrics():  # the reward-health figures are in TRL's own logged metrics
        assert logs["judge/health_window"] == len(batch) and logs["judge/health_fallback_share"] == 0.0
        assert logs["judge/health_judge_rule_agreement"] == 1.0  # the rule judge agrees with the rules


@pytest.mark.parametrize("conversational", [False, True], ids=["plain", "conversational"])
def test_a_grpo_step_gets_group_relative_rewards_from_a_pairwise_judge(tiny_model_dir, tmp_path, conversational):
    server = GroupJudgeServer("longer")
    reward = JudgeReward({"judge_url": server.url, "max_retries": 0, "group_relative": True}, answer_column=None)
    try:
        logs = grpo_step(tiny_model_dir, dataset(conversational), reward, tmp_path)
    finally:
        reward.close()
        server.close()
    assert [body["path"] for body in server.bodies] == ["/judge_group"] * len(QUESTIONS)  # one request per prompt
    assert all(len(body["completions"]) == GENERATIONS for body in server.bodies)
    prompts = sorted(str(body["prompt"]) for body in server.bodies)
    assert all(question in prompt for (question, _), prompt in zip(QUESTIONS, prompts, strict=True))
    # every completion's mean win probability: the group's rewards average 0.5 (each comparison pays 1 in all)
    assert logs["rewards/judge/mean"] == pytest.approx(0.5)
    if trl_logs_metrics():
        assert logs["judge/failed_comparisons"] == 0.0 and logs["judge/not_from_judge"] == 0.0


def trl_logs_metrics() -> bool:
    """Whether this TRL hands reward functions `log_metric` (1.x does; 0.x logs only the rewards)."""
    import trl

    return int(trl.__version__.split(".")[0]) >= 1


def test_without_the_fallback_a_dead_judge_gives_trl_no_reward(tiny_model_dir, tmp_path):
    config = {"judge_url": f"http://127.0.0.1:{free_port()}", "max_retries": 0, "fallback_to_rule": False}
    reward = JudgeReward(config, answer_column="reference")
    returned = []
    call = reward.__call__

    class Recording:
        __name__ = "judge"

        def __call__(self, *args, **kwargs):
            returned.append(call(*args, **kwargs))
            return returned[-1]

    logs = grpo_step(tiny_model_dir, dataset(conversational=False), Recording(), tmp_path)
    reward.close()
    assert returned == [[None] * (len(QUESTIONS) * GENERATIONS)]
    mean = logs["rewards/judge/mean"]
    assert mean is None or mean != mean  # TRL 1.x logs None, 0.26 NaN: no reward was counted, not a 0


def test_with_the_fallback_a_dead_judge_gives_tagged_rule_rewards():
    reward = JudgeReward({"judge_url": f"http://127.0.0.1:{free_port()}", "max_retries": 0}, answer_column="reference")
    logged = {}
    rewards = reward(
        ["What is 2+2?", "What is 2+2?"],
        ["\\boxed{4}", "\\boxed{5}"],
        reference=["4", "4"],
        log_metric=lambda name, value: logged.setdefault(name, value),
        log_extra=lambda column, values: logged.setdefault(column, values),
    )
    reward.close()
    assert rewards == [1.0, 0.0]
    assert logged["judge/not_from_judge"] == 1.0 and logged["judge_source"] == ["rule_fallback", "rule_fallback"]
    assert logged["judge/health_fallback_share"] == 1.0 and logged["judge/health_reward_mean"] == 0.5


def test_a_missing_reference_column_is_named():
    reward = JudgeReward({"judge_url": "http://127.0.0.1:9"}, answer_column="solution")
    with pytest.raises(KeyError, match=r"no column 'solution' \(columns passed by the trainer: \['reference'\]\)"):
        reward(["What is 2+2?"], ["4"], reference=["4"], trainer_state=object())
    reward.close()
