"""The real judge server with a tiny generative judge: a random-init model answers gibberish, so every
judgement must come back as an error for its own request (score null), never as a score."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.servers import start_server
from tests.test_serving_scalar import assert_clean_shutdown, metric_value, post_concurrently, varied_requests

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


def test_batch_items_fail_one_by_one_in_order(server):
    requests = varied_requests(5, seed=5)
    errors_before = metric_value(server.url, "judge_judgements_total", {"outcome": "error"})
    response = httpx.post(f"{server.url}/batch_judge", json={"requests": requests}, timeout=120)
    assert response.status_code == 200
    responses = response.json()["responses"]
    assert [r["request_id"] for r in responses] == [r["request_id"] for r in requests]
    assert all(r["score"] is None and r["error"] for r in responses)
    assert metric_value(server.url, "judge_judgements_total", {"outcome": "error"}) - errors_before == 5


def test_concurrent_generations_keep_their_request_ids(server):
    requests = varied_requests(8, seed=6)
    responses = asyncio.run(post_concurrently(server.url, "/judge", requests))
    assert [r.json()["request_id"] for r in responses] == [r["request_id"] for r in requests]
    assert httpx.get(f"{server.url}/health").json()["queue_depth"] == 0
