"""The pairwise generative judge on a tiny real model scripted to known probabilities of A and B: /judge compares
the completion with the reference `answer` in both orders, /compare's judge method response_a with response_b;
in process, in the real judge server, and through the reward adapter (JudgeRewardSystem). Also the mapping of
vLLM's outputs to generations, on plain objects of vLLM's shape (the real engine runs in
tests/frameworks/test_vllm_serving.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import httpx
import pytest

from judge_models.config import JudgeConfig
from judge_models.engine import Generation
from judge_models.vllm_engine import generation_from_vllm
from serving.judges import ComparisonItem, JudgeItem, load_judge
from serving.judges.pairwise import NO_REFERENCE
from tests.reward_adapter_servers import make_system
from tests.support.servers import start_server
from tests.test_serving_generative import EOS, build_script_judge
from tests.test_serving_scalar import assert_clean_shutdown

# What the judge answers after the marker that ends response A (see build_script_judge).
PAIRWISE_SCRIPT = {
    "<good>": "<think>good</think><better>",
    # 0.2 goes to "C", no verdict: renormalized over A and B, A has 0.9.
    "<think>good</think><better>": {"A": 0.72, "B": 0.08, "C": 0.2},
    "<bad>": "<think>bad</think><better>",
    "<think>bad</think><better>": {"B": 0.7, "A": 0.3},
    # Whatever it reads, A with 0.8: a judge that prefers the first position.
    "<first>": "<think>first</think><better>",
    "<think>first</think><better>": {"A": 0.8, "B": 0.2},
    "<broken>": "<think>broken</think>",
    "<think>broken</think>": EOS,
    "A": "</better>",
    "B": "</better>",
    "</better>": EOS,
}
QUESTION = "What is 2 + 2?"
# Completion <good> vs reference <bad>: 0.9 with the completion as A (it ends the prompt: <good>), 0.7 as B.
BETTER = JudgeItem(QUESTION, "It is 4. <good>", answer="It is 5. <bad>")
BETTER_ORDER_SCORES = [0.9, 0.7]
BIASED = JudgeItem(QUESTION, "It is 4. <first>", answer="It is four. <first>")
NO_ANSWER = JudgeItem(QUESTION, "It is 4. <good>")
BROKEN_AS_REFERENCE = JudgeItem(QUESTION, "It is 4. <good>", answer="It is 5. <broken>")


@pytest.fixture(scope="module")
def pairwise_judge_dir(tiny_model_dir, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("pairwise_script_judge")
    return build_script_judge(tiny_model_dir, out_dir, PAIRWISE_SCRIPT, "Response A", prompt_format="pairwise")


@pytest.fixture(scope="module")
def expected_judge(pairwise_judge_dir):
    return load_judge(JudgeConfig(model=str(pairwise_judge_dir), max_new_tokens=8))


def test_the_completion_is_compared_with_the_reference_in_both_orders(expected_judge):
    assert expected_judge.identity.kind == "pairwise"
    better, biased = expected_judge.score_batch([BETTER, BIASED])
    assert better.error is None and better.score == pytest.approx(sum(BETTER_ORDER_SCORES) / 2, abs=1e-6)
    assert better.metadata["order_scores"] == pytest.approx(BETTER_ORDER_SCORES, abs=1e-6)
    assert better.metadata["verdicts"] == ["completion", "completion"]
    assert (better.metadata["orders_agree"], better.metadata["score_mode"]) == (True, "expected")
    assert better.explanation == "[completion as A] good\n\n[completion as B] bad"
    assert biased.score == pytest.approx(0.5, abs=1e-6)
    assert biased.metadata["order_scores"] == pytest.approx([0.8, 0.2], abs=1e-6)
    assert (biased.metadata["verdicts"], biased.metadata["orders_agree"]) == (["completion", "reference"], False)


def test_an_item_without_a_reference_or_with_an_unparsable_order_is_an_error(expected_judge):
    no_answer, broken, better = expected_judge.score_batch([NO_ANSWER, BROKEN_AS_REFERENCE, BETTER])
    assert (no_answer.score, no_answer.error) == (None, NO_REFERENCE)
    assert broken.score is None
    assert broken.error == (
        "judging the completion as response B: unparsable judge answer: no <better>...</better> after the reasoning"
    )
    assert broken.metadata["judge_output"] == "<think>broken</think>"
    assert better.score == pytest.approx(0.8, abs=1e-6)
    assert expected_judge.score_batch([NO_ANSWER])[0].error == NO_REFERENCE  # nothing left to generate


def test_compare_batch_gives_the_probability_that_response_a_is_better(expected_judge):
    worse_first = ComparisonItem(QUESTION, "It is 5. <bad>", "It is 4. <good>")
    better_first = ComparisonItem(QUESTION, "It is 4. <good>", "It is 5. <bad>")
    worse, better = expected_judge.compare_batch([worse_first, better_first])
    # response_a <bad> as A: P(A) = 0.3; as B, after response_b <good>: P(B) = 0.1.
    assert worse.metadata["order_scores"] == pytest.approx([0.3, 0.1], abs=1e-6)
    assert worse.score == pytest.approx(0.2, abs=1e-6)
    assert (worse.metadata["verdicts"], worse.metadata["orders_agree"]) == (["response_b", "response_b"], True)
    assert better.score == pytest.approx(0.8, abs=1e-6)
    assert better.metadata["verdicts"] == ["response_a", "response_a"]


def test_sample_mode_averages_the_generated_verdicts(pairwise_judge_dir):
    judge = load_judge(JudgeConfig(model=str(pairwise_judge_dir), max_new_tokens=8, score_mode="sample"))
    better, biased = judge.score_batch([BETTER, BIASED])
    assert (better.score, better.metadata["order_scores"], better.metadata["score_mode"]) == (1.0, [1.0, 1.0], "sample")
    assert (biased.score, biased.metadata["order_scores"], biased.metadata["orders_agree"]) == (0.5, [1.0, 0.0], False)


# ---- the vLLM backend's output mapping -----------------------------------------------------------------


@dataclass
class Logprob:  # vllm.logprobs.Logprob of vLLM 0.11 to 0.32
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:  # vllm.outputs.CompletionOutput of vLLM 0.11 to 0.32, the fields a generation reads
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


def test_vllm_top_logprobs_become_candidate_logprobs_missing_ones_zero_probability():
    steps = [
        {7: Logprob(-0.1, 1), 35: Logprob(-2.5, 2)},  # candidate 36 is not in this step's top K
        {36: Logprob(-0.2, 1), 35: Logprob(-1.8, 2), 9: Logprob(-3.0, 3)},
    ]
    completion = CompletionOutput(0, "xB", [7, 36, 2], -0.3, steps + [{2: Logprob(0.0, 1)}], "stop", None)
    generation = generation_from_vllm(completion, candidate_ids=[35, 36])
    assert (generation.text, generation.token_ids, generation.hit_token_limit) == ("xB", (7, 36, 2), False)
    assert generation.candidate_logprobs == ((-2.5, -math.inf), (-1.8, -0.2), (-math.inf, -math.inf))
    cut = CompletionOutput(0, "x", [7], None, None, "length")
    assert generation_from_vllm(cut, candidate_ids=[]) == Generation(text="x", token_ids=(7,), hit_token_limit=True)


# ---- served ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(pairwise_judge_dir, tmp_path_factory):
    running = start_server(
        ["--model", str(pairwise_judge_dir), "--max-new-tokens", "8", "--batch-timeout", "0"],
        log_path=tmp_path_factory.mktemp("pairwise_server") / "server.log",
    )
    yield running
    assert_clean_shutdown(running)


def request(item: JudgeItem, request_id: str) -> dict:
    body = {"prompt": item.prompt, "completion": item.completion, "request_id": request_id}
    return body if item.answer is None else {**body, "answer": item.answer}


def test_a_served_pairwise_judge_answers_judge_and_batch_judge(server):
    health = httpx.get(f"{server.url}/health").json()
    assert (health["judge_kind"], health["model_loaded"]) == ("pairwise", True)
    single = httpx.post(f"{server.url}/judge", json=request(BETTER, "p1"), timeout=60).json()
    assert (single["request_id"], single["error"]) == ("p1", None)
    assert single["score"] == pytest.approx(0.8, abs=1e-6)
    assert single["metadata"]["order_scores"] == pytest.approx(BETTER_ORDER_SCORES, abs=1e-6)
    assert (single["metadata"]["verdicts"], single["metadata"]["orders_agree"]) == (["completion"] * 2, True)
    items = [BIASED, NO_ANSWER, BETTER]
    batch = httpx.post(
        f"{server.url}/batch_judge", json={"requests": [request(item, f"b{i}") for i, item in enumerate(items)]}
    ).json()["responses"]
    assert [body["request_id"] for body in batch] == ["b0", "b1", "b2"]
    assert batch[0]["score"] == pytest.approx(0.5, abs=1e-6) and batch[0]["metadata"]["orders_agree"] is False
    assert (batch[1]["score"], batch[1]["error"]) == (None, NO_REFERENCE)
    assert batch[2]["score"] == pytest.approx(0.8, abs=1e-6)


def test_the_reward_adapter_gets_rewards_from_a_served_pairwise_judge(server):
    with make_system(server.url, timeout=60.0, fallback_to_rule=False) as system:
        result = system.reward(BETTER.prompt, BETTER.completion, BETTER.answer)
        results = system.reward_batch(
            [{"prompt": i.prompt, "completion": i.completion, "answer": i.answer} for i in (BIASED, BETTER)]
        )
    assert (result["source"], result["error"]) == ("judge", None)
    assert result["reward"] == pytest.approx(0.8, abs=1e-6)
    assert [r["reward"] for r in results] == pytest.approx([0.5, 0.8], abs=1e-6)
