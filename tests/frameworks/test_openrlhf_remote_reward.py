"""OpenRLHF 0.11's own reward code (openrlhf.utils.agent.SingleTurnAgentExecutor: its tiny_tokenizer calls, its
`query` decoding, its aiohttp request with retries, its local-file loader) against the judge server's
/openrlhf/reward route and against judge_rewards/openrlhf_reward.py. OpenRLHF is installed without its
dependencies (deepspeed, flash-attn, vLLM: CUDA builds): its rollout engine is replaced by a stand-in that
"generates" a fixed answer, everything after generation is OpenRLHF's. Runs in the openrlhf-0.11.0 environment."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from openrlhf.utils.agent import SingleTurnAgentExecutor

from tests.conftest import REPO_ROOT
from tests.reward_adapter_servers import start_rule_server

pytestmark = pytest.mark.e2e

ROUTE = "/openrlhf/reward"
REWARD_FILE = str(REPO_ROOT / "judge_rewards" / "openrlhf_reward.py")
MAX_LENGTH = 256


@dataclass
class SamplingParams:
    """The two fields of vLLM's SamplingParams that OpenRLHF's executor reads."""

    max_tokens: int | None = 32
    logprobs: int | None = None


class FixedAnswerEngine:
    """Stands in for OpenRLHF's vLLM engine: answers every prompt with `answers[prompt text]` and the end of turn."""

    def __init__(self, tiny_tokenizer, answers: dict[str, str]):
        self.tiny_tokenizer = tiny_tokenizer
        self.answers = answers

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        prompt = self.tiny_tokenizer.decode(prompt_token_ids, skip_special_tokens=False)
        text = self.answers[prompt] + "<|im_end|>"
        token_ids = self.tiny_tokenizer(text=text, add_special_tokens=False)["input_ids"]
        output = SimpleNamespace(token_ids=token_ids, text=text, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


def rollouts(tiny_tokenizer, count: int = 8) -> list[tuple[str, str, str, float]]:
    """(chat-templated prompt, the policy's answer, label, the rule judge's reward): right for even samples."""
    cases = []
    for i in range(count):
        messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": f"What is {i}+1?"}]
        prompt = tiny_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        answer = i + 1 if i % 2 == 0 else i + 3
        cases.append((prompt, f"The answer is \\boxed{{{answer}}}.", str(i + 1), 1.0 if i % 2 == 0 else 0.0))
    return cases


def run_rollouts(executor, tiny_tokenizer, cases) -> list[dict]:
    engine = FixedAnswerEngine(tiny_tokenizer, {prompt: answer for prompt, answer, *_ in cases})

    async def every():
        return await asyncio.gather(
            *(
                executor.execute(prompt, label, SamplingParams(), MAX_LENGTH, tiny_tokenizer, engine)
                for prompt, _, label, _ in cases
            )
        )

    return asyncio.run(every())


def test_the_judge_server_answers_openrlhfs_remote_reward_request(rule_judge_server, tiny_tokenizer):
    executor = SingleTurnAgentExecutor(
        remote_rm_url=[rule_judge_server.url + ROUTE]
    )  # as --reward.remote_url splits it
    cases = rollouts(tiny_tokenizer)
    outputs = run_rollouts(executor, tiny_tokenizer, cases)
    assert [output["reward"] for output in outputs] == [[expected] for *_, expected in cases]
    assert [output["scores"] for output in outputs] == [[expected] for *_, expected in cases]
    assert all(output["extra_logs"] == {} for output in outputs)


def test_a_prompt_that_cannot_be_recovered_gets_no_reward_and_the_server_says_why(rule_judge_server, tiny_tokenizer):
    executor = SingleTurnAgentExecutor(remote_rm_url=[rule_judge_server.url + ROUTE])
    prompt, answer, label, _ = rollouts(tiny_tokenizer, 1)[0]
    broken = prompt.replace("<|im_end|>\n<|im_start|>user", "<|im_end|>\nstray text<|im_start|>user")
    (output,) = run_rollouts(executor, tiny_tokenizer, [(broken, answer, label, None)])
    assert output["reward"] is None and output["scores"] is None  # OpenRLHF's own retries, then no reward
    assert "sample 0: the prompt is ChatML markup but not a sequence of whole turns" in rule_judge_server.log()


def test_the_reward_file_goes_through_the_adapter_and_tags_the_rule_fallback(tmp_path, tiny_tokenizer, monkeypatch):
    server = start_rule_server(tmp_path / "server.log")
    monkeypatch.setenv("JUDGE_MODEL_URL", server.url)
    monkeypatch.setenv("JUDGE_REWARD_CONFIG", '{"max_retries": 0, "timeout": 5}')
    executor = SingleTurnAgentExecutor(remote_rm_url=[REWARD_FILE])  # OpenRLHF loads reward_func from the file
    cases = rollouts(tiny_tokenizer)
    try:
        judged = run_rollouts(executor, tiny_tokenizer, cases)
        metrics = executor.reward_func.__globals__["reward_system"]().get_metrics()
    finally:
        server.kill()
    assert [output["reward"] for output in judged] == [[expected] for *_, expected in cases]
    assert all(output["extra_logs"]["judge_rule_fallback"] == [0.0] for output in judged)
    assert metrics["judge_successes"] == len(cases)

    fresh = rollouts(tiny_tokenizer, 12)[len(cases) :]  # not cached: they need the judge, which is gone
    fallen_back = run_rollouts(executor, tiny_tokenizer, fresh)
    assert [output["reward"] for output in fallen_back] == [[expected] for *_, expected in fresh]
    assert all(output["extra_logs"]["judge_rule_fallback"] == [1.0] for output in fallen_back)
