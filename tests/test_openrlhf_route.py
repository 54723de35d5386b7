"""The judge server's /openrlhf/reward route (OpenRLHF's remote reward protocol) and the rollout text recovery
behind it (judge_core.protocol.chat_markup), with the real app and rule judge in process; the judge's
received items are recorded. OpenRLHF's own client code drives the route in
tests/frameworks/test_openrlhf_remote_reward.py (openrlhf-0.11.0 environment)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from judge_core.protocol.chat_markup import RolloutTextError, split_rollout
from judge_models.config import JudgeConfig
from judge_rewards.reward_config import ConfigError
from serving.config import ServingConfig
from serving.judges import load_judge
from serving.server import build_local_app

ROUTE = "/openrlhf/reward"
CHATML_PROMPT = (
    "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
)
QWEN3_NO_THINKING = CHATML_PROMPT + "<think>\n\n</think>\n\n"
MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}]
LLAMA3_PROMPT = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nAnswer briefly.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)
GEMMA_PROMPT = "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"


@pytest.fixture
def recorded():
    """A client of the real app and rule judge, and the items the judge received."""
    judge = load_judge(JudgeConfig(judge="rule"))
    received = []
    score_batch = judge.score_batch

    def recording(items):
        received.extend(items)
        return score_batch(items)

    judge.score_batch = recording
    with TestClient(build_local_app(judge, ServingConfig())) as client:
        yield client, received


def test_openrlhfs_request_gets_its_answer_shape_and_the_judge_reads_plain_text(recorded):
    client, received = recorded
    body = {
        "query": [CHATML_PROMPT + "The answer is \\boxed{4}.<|im_end|>", CHATML_PROMPT + "It is \\boxed{5}<|im_end|>"],
        "prompts": [CHATML_PROMPT, CHATML_PROMPT],
        "labels": ["4", "4"],
    }
    answer = client.post(ROUTE, json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"rewards": [1.0, 0.0], "scores": [1.0, 0.0], "extra_logs": {}}
    assert [(item.prompt, item.completion, item.answer) for item in received] == [
        (MESSAGES, "The answer is \\boxed{4}.", "4"),
        (MESSAGES, "It is \\boxed{5}", "4"),
    ]


@pytest.mark.parametrize(
    "query, prompt, expected",
    [
        (CHATML_PROMPT + "4<|im_end|><|endoftext|>", CHATML_PROMPT, (MESSAGES, "4")),
        (CHATML_PROMPT + "4 and more", CHATML_PROMPT, (MESSAGES, "4 and more")),  # cut by the length limit
        (CHATML_PROMPT + "4<|im_end|>\n<|im_start|>user\nmore", CHATML_PROMPT, (MESSAGES, "4")),
        (QWEN3_NO_THINKING + "4<|im_end|>", QWEN3_NO_THINKING, (MESSAGES, "4")),
        (LLAMA3_PROMPT + "4<|eot_id|>", LLAMA3_PROMPT, (MESSAGES, "4")),
        (GEMMA_PROMPT + "4<end_of_turn>", GEMMA_PROMPT, ([MESSAGES[1]], "4")),
        ("Q: What is 2+2?\nA: 4</s>", "Q: What is 2+2?\nA:", ("Q: What is 2+2?\nA:", " 4")),
    ],
    ids=["chatml-eos", "chatml-truncated", "chatml-runs-on", "qwen3-no-thinking", "llama3", "gemma", "plain"],
)
def test_prompt_and_response_are_recovered_as_text(query, prompt, expected):
    assert split_rollout(query, prompt) == expected


@pytest.mark.parametrize(
    "query, prompt, reason",
    [
        ("What is 3+3? 6", "What is 2+2?", "the query does not begin with its prompt"),
        (CHATML_PROMPT[:-10] + "x 4", CHATML_PROMPT[:-10], "does not end with the assistant's open turn"),
        (
            "stray" + CHATML_PROMPT + "4",
            "stray" + CHATML_PROMPT,
            r"not a sequence of whole turns before the generation prompt: 'stray<\|im_start\|>",
        ),
    ],
    ids=["not-a-prefix", "no-generation-prompt", "text-between-turns"],
)
def test_a_rollout_that_cannot_be_recovered_is_refused_per_sample(recorded, query, prompt, reason):
    with pytest.raises(RolloutTextError, match=reason):
        split_rollout(query, prompt)
    client, received = recorded
    good = CHATML_PROMPT + "\\boxed{4}"
    answer = client.post(ROUTE, json={"query": [good, query], "prompts": [CHATML_PROMPT, prompt], "labels": ["4", "4"]})
    assert answer.status_code == 422
    (refusal,) = answer.json()["detail"]
    assert refusal.startswith("sample 1: ") and received == []  # nothing is judged, nothing made up


def test_a_sample_the_judge_cannot_score_fails_the_request_naming_it(recorded):
    client, _ = recorded
    body = {"query": [CHATML_PROMPT + "\\boxed{4}"], "prompts": [CHATML_PROMPT]}  # no labels: no reference
    answer = client.post(ROUTE, json=body)
    assert answer.status_code == 500
    (failure,) = answer.json()["detail"]
    assert failure.startswith("sample 0: ") and "reference" in failure


def test_one_entry_per_sample_is_required(recorded):
    client, _ = recorded
    answer = client.post(ROUTE, json={"query": ["a", "b"], "prompts": ["a"], "labels": ["1", "2"]})
    assert answer.status_code == 422
    assert "one entry per sample, got lengths {'query': 2, 'prompts': 1, 'labels': 2}" in answer.text


@pytest.mark.parametrize(
    "setting, message",
    [("{not json", "JUDGE_REWARD_CONFIG is not JSON"), ('["timeout"]', "must be a JSON object of adapter settings")],
)
def test_the_reward_file_refuses_a_bad_judge_reward_config(monkeypatch, setting, message):
    from judge_rewards import openrlhf_reward

    monkeypatch.setattr(openrlhf_reward, "_system", None)
    monkeypatch.setenv("JUDGE_REWARD_CONFIG", setting)
    with pytest.raises(ConfigError, match=re.escape(message)):
        openrlhf_reward.reward_system()


def test_the_reward_file_names_a_sample_it_cannot_recover():
    from judge_rewards.openrlhf_reward import reward_func

    with pytest.raises(RolloutTextError, match=r"judge reward: sample 1: the query does not begin with its prompt"):
        reward_func([CHATML_PROMPT + "4", "What is 3+3? 6"], [CHATML_PROMPT, "What is 2+2?"], ["4", "4"])
