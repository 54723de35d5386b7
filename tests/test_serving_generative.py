"""The real judge server with tiny generative judges. A random-init model answers gibberish, so each of its
judgements must come back as an error (score null), never as a score. A scripted model gives every item an
answer of its own (a score, or an unparsable answer), so a verdict that reaches another item's request fails."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from tests.support.models import save_successor_judge
from tests.support.servers import start_server
from tests.test_serving_scalar import WORDS, assert_clean_shutdown, metric_value, post_concurrently

MAX_NEW_TOKENS = 8


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):  # no judge.json: the kind comes from the config's LlamaForCausalLM
    running = start_server(
        [
            "--model",
            str(tiny_model_dir),
            "--max-new-tokens",
            str(MAX_NEW_TOKENS),
            "--max-batch-size",
            "4",
            "--temperature",
            "0",
        ],
        log_path=tmp_path_factory.mktemp("generative_server") / "server.log",
    )
    yield running
    assert_clean_shutdown(running)


def test_health_names_a_generative_judge(server):
    health = httpx.get(f"{server.url}/health").json()
    assert (health["judge_kind"], health["backend"], health["model_loaded"]) == ("generative", "transformers", True)


def test_an_unparsable_answer_is_an_error_not_a_score(server):
    response = httpx.post(
        f"{server.url}/judge", json={"prompt": "What is 2+2?", "completion": "4", "request_id": "g1"}, timeout=60
    )
    assert response.status_code == 200
    body = response.json()
    assert body["request_id"] == "g1" and body["score"] is None
    assert body["error"].startswith("unparsable judge answer: ")
    assert isinstance(body["metadata"]["judge_output"], str)
    assert 0 < body["metadata"]["generated_tokens"] <= MAX_NEW_TOKENS


SCRIPTED_ITEMS = 8


def scripted_answer(item: int) -> str:
    """Item 0..4 scores item/4; items 5..7 give an out-of-range score, an unparsable answer."""
    return f"<think>verdict {item}</think><score>{item}</score>"


def build_scripted_generative_judge(tiny_model_dir, out_dir):
    """A real Llama causal LM whose greedy answer to a judge prompt whose response ends with the marker
    token `<item i>` is scripted_answer(i), for i < SCRIPTED_ITEMS.

    Its chat template keeps only the response to rate, so each prompt ends with its marker; attention and
    MLP outputs are zeroed and the embeddings one-hot, so the LM head maps the marker to its answer (one
    added token) and the answer to the end of the turn. What is under test is the server's batching and
    ordering, not the model."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = "{{ messages[0]['content'].split('## Response to rate\\n')[1].split('\\n\\n')[0] }}"
    markers = [f"<item{i}>" for i in range(SCRIPTED_ITEMS)]
    answers = [scripted_answer(i) for i in range(SCRIPTED_ITEMS)]
    tokenizer.add_tokens(markers + answers)
    marker_ids, answer_ids = tokenizer.convert_tokens_to_ids(markers), tokenizer.convert_tokens_to_ids(answers)
    successors = {**dict(zip(marker_ids, answer_ids, strict=True)), **dict.fromkeys(answer_ids, tokenizer.eos_token_id)}
    return save_successor_judge(tokenizer, successors, out_dir)


@pytest.fixture(scope="module")
def scripted_server(tiny_model_dir, tmp_path_factory):
    model_dir = build_scripted_generative_judge(tiny_model_dir, tmp_path_factory.mktemp("scripted_judge"))
    running = start_server(
        # The long batch timeout lets concurrent requests meet in batches of 4 (a batch of 1 cannot cross verdicts).
        ["--model", str(model_dir), "--max-batch-size", "4", "--batch-timeout", "2", "--temperature", "0"],
        log_path=tmp_path_factory.mktemp("scripted_server") / "server.log",
    )
    yield running
    assert_clean_shutdown(running)


def scripted_requests(seed: int) -> list[tuple[int, dict]]:
    """One request per scripted item, shuffled, of varied lengths (so batches hold several length groups)."""
    rng = random.Random(seed)
    items = rng.sample(range(SCRIPTED_ITEMS), SCRIPTED_ITEMS)
    return [
        (
            item,
            {
                "prompt": " ".join(rng.choices(WORDS, k=rng.randint(2, 30))),
                "completion": " ".join(rng.choices(WORDS, k=rng.randint(1, 60))) + f" <item{item}>",
                "request_id": f"req-{position}",
            },
        )
        for position, item in enumerate(items)
    ]


def assert_answers_its_own_item(body: dict, item: int, request: dict) -> None:
    assert body["request_id"] == request["request_id"]
    if item <= 4:
        assert (body["score"], body["error"]) == (item / 4, None)
        assert (body["explanation"], body["metadata"]["judge_score"]) == (f"verdict {item}", item)
    else:
        assert (body["score"], body["error"]) == (None, f"unparsable judge answer: score {item} outside 0..4")
        assert body["metadata"]["judge_output"] == scripted_answer(item)


def test_batch_items_are_judged_one_by_one_in_order(scripted_server):
    requests = scripted_requests(seed=5)
    errors_before = metric_value(scripted_server.url, "judge_judgements_total", {"outcome": "error"})
    response = httpx.post(
        f"{scripted_server.url}/batch_judge", json={"requests": [r for _, r in requests]}, timeout=120
    )
    assert response.status_code == 200
    responses = response.json()["responses"]
    assert len(responses) == len(requests)
    for body, (item, request) in zip(responses, requests, strict=True):
        assert_answers_its_own_item(body, item, request)
    assert max(body["metadata"]["batch_size"] for body in responses) > 1
    errors = metric_value(scripted_server.url, "judge_judgements_total", {"outcome": "error"}) - errors_before
    assert errors == SCRIPTED_ITEMS - 5


def test_concurrent_generations_keep_their_request_ids(scripted_server):
    requests = scripted_requests(seed=6)
    responses = asyncio.run(post_concurrently(scripted_server.url, "/judge", [r for _, r in requests]))
    bodies = [r.json() for r in responses]
    for body, (item, request) in zip(bodies, requests, strict=True):
        assert_answers_its_own_item(body, item, request)
    assert max(body["metadata"]["batch_size"] for body in bodies) > 1
    assert httpx.get(f"{scripted_server.url}/health").json()["queue_depth"] == 0
