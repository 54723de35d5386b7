"""judge_models.openai_engine's parts that need no engine: reading a `/completions` or `/chat/completions` answer,
and the start-up refusals of a misconfigured backend (the engine itself: tests/frameworks/test_openai_backend.py
and test_vllm_vlm.py, on vLLM)."""

from __future__ import annotations

import math

import pytest

from judge_models.config import JudgeConfig
from judge_models.engine import BackendUnavailable
from judge_models.openai_engine import check_engine, generation_from_chat, generation_from_completion
from tests.support.servers import free_port


def completion(tokens: list[str], top: list[dict], finish: str = "stop") -> dict:
    logprobs = {"tokens": tokens, "top_logprobs": top}
    return {"choices": [{"text": "<score>3</score>", "finish_reason": finish, "logprobs": logprobs}], "usage": {}}


def test_tokens_named_by_id_give_the_generation_and_each_candidates_logprob():
    top = [{"token_id:7": -0.1}, {"token_id:9": -0.5, "token_id:8": -1.5}]
    generation = generation_from_completion(completion(["token_id:7", "token_id:9"], top, "length"), [8, 9, 10])
    assert generation.token_ids == (7, 9) and generation.hit_token_limit and generation.new_tokens == 2
    assert generation.candidate_logprobs == ((-math.inf,) * 3, (-1.5, -0.5, -math.inf))


def test_tokens_named_by_text_leave_the_ids_unknown_and_count_from_usage():
    answer = {**completion(["<", "score"], []), "usage": {"completion_tokens": 5}}
    generation = generation_from_completion(answer, [])
    assert (generation.token_ids, generation.new_tokens, generation.candidate_logprobs) == ((), 5, ())


def test_a_chat_answer_reads_like_a_completion():
    steps = [
        {"token": "token_id:7", "logprob": -0.1, "top_logprobs": [{"token": "token_id:7", "logprob": -0.1}]},
        {"token": "token_id:9", "logprob": -0.5, "top_logprobs": [{"token": "token_id:8", "logprob": -1.5}]},
    ]
    choice = {"message": {"content": "<score>3</score>"}, "finish_reason": "stop", "logprobs": {"content": steps}}
    generation = generation_from_chat({"choices": [choice]}, [8, 9])
    assert (generation.text, generation.token_ids, generation.hit_token_limit) == ("<score>3</score>", (7, 9), False)
    assert generation.candidate_logprobs == ((-math.inf, -math.inf), (-1.5, -math.inf))
    unnamed = generation_from_chat({"choices": [{**choice, "logprobs": None}], "usage": {"completion_tokens": 4}}, [])
    assert (unnamed.token_ids, unnamed.new_tokens) == ((), 4)


def test_the_openai_backend_needs_an_engine_url_and_names_an_unreachable_one(tmp_path):
    with pytest.raises(ValueError, match=r"--backend openai needs --openai-base-url"):
        JudgeConfig(model=str(tmp_path), backend="openai", openai_base_url=None)
    url = f"http://127.0.0.1:{free_port()}/v1"
    config = JudgeConfig(model=str(tmp_path), backend="openai", openai_base_url=url)
    with pytest.raises(BackendUnavailable, match=rf"--openai-base-url {url}: no engine answers GET /models"):
        check_engine(config, needs_logprobs=True)
