"""The real judge server (`python -m serving`) with a tiny scalar (Bradley-Terry) judge, over HTTP."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import signal
import socket

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from judge_core.protocol import templates
from tests.support.servers import start_server

MAX_TEXT_CHARS = 5000
MAX_BATCH_REQUESTS = 64
MAX_INPUT_TOKENS = 256
MAX_BODY_BYTES = 400_000
WORDS = [
    "the",
    "judge",
    "reads",
    "every",
    "answer",
    "and",
    "scores",
    "it",
    "from",
    "zero",
    "to",
    "four",
    "with",
    "care",
]


def varied_requests(count: int, seed: int = 0) -> list[dict]:
    """Requests of varied lengths (so that batches hold several length groups), each with its own id."""
    rng = random.Random(seed)
    return [
        {
            "prompt": " ".join(rng.choices(WORDS, k=rng.randint(2, 30))),
            "completion": " ".join(rng.choices(WORDS, k=rng.randint(1, 60))),
            "request_id": f"req-{i}",
        }
        for i in range(count)
    ]


def unbatched_rewards(model_dir, requests: list[dict]) -> dict[str, float]:
    """Each request's reward computed alone in this process: what the server must return whatever the batching."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    rewards = {}
    for request in requests:
        text = tokenizer.apply_chat_template(
            templates.conversation_messages(request["prompt"], request["completion"]), tokenize=False
        )
        with torch.inference_mode():
            inputs = tokenizer(text, add_special_tokens=False, return_tensors="pt")
            rewards[request["request_id"]] = model(**inputs).logits[0, 0].item()
    return rewards


async def post_concurrently(
    url: str, path: str, bodies: list[dict], headers: dict | None = None
) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=headers) as client:
        return await asyncio.gather(*(client.post(path, json=body) for body in bodies))


def metric_value(url: str, name: str, labels: dict | None = None, headers: dict | None = None) -> float:
    text = httpx.get(f"{url}/metrics", headers=headers, timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                return sample.value
    return 0.0


def assert_clean_shutdown(server) -> None:
    """Stopped by SIGTERM, the server finishes its shutdown (uvicorn then exits by re-raising the signal)."""
    assert server.stop() in (0, -signal.SIGTERM)
    log = server.log()
    assert "Finished server process" in log and "Traceback" not in log


@pytest.fixture(scope="module")
def server(tiny_scalar_judge_dir, tmp_path_factory):
    running = start_server(
        [
            "--model",
            str(tiny_scalar_judge_dir),
            "--max-batch-size",
            "8",
            "--batch-timeout",
            "0.2",
            "--max-text-chars",
            str(MAX_TEXT_CHARS),
            "--max-batch-requests",
            str(MAX_BATCH_REQUESTS),
            "--max-input-tokens",
            str(MAX_INPUT_TOKENS),
            "--max-body-bytes",
            str(MAX_BODY_BYTES),
        ],
        log_path=tmp_path_factory.mktemp("scalar_server") / "server.log",
    )
    yield running
    assert_clean_shutdown(running)


def test_health_names_the_judge(server, tiny_scalar_judge_dir):
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok" and health["model_loaded"] is True
    assert (health["judge_kind"], health["backend"], health["model_id"]) == (
        "scalar",
        "transformers",
        tiny_scalar_judge_dir.name,
    )
    assert len(health["model_version"]) == 12
    assert (health["max_batch_size"], health["batch_timeout"], health["queue_depth"]) == (8, 0.2, 0)


def test_judge_answers_the_guide_example(server):
    response = httpx.post(
        f"{server.url}/judge",
        json={
            "prompt": "What is 2+2?",
            "completion": "The answer is **boxed{4}**",
            "answer": "4",
            "answer_type": "NUMBER",
            "request_id": "unique_id",
        },
    )
    assert response.status_code == 200
    body = response.json()
    assert body["request_id"] == "unique_id" and body["error"] is None
    raw = body["metadata"]["raw_reward"]
    assert body["score"] == pytest.approx(1 / (1 + math.exp(-raw)))  # judge.json: center 0, scale 1
    assert body["metadata"]["latency"] > 0 and body["metadata"]["judge"] == "scalar"
    assert body["explanation"].startswith("reward ")


def test_concurrent_requests_each_get_their_own_score(server, tiny_scalar_judge_dir):
    requests = varied_requests(40)
    expected = unbatched_rewards(tiny_scalar_judge_dir, requests)
    ordered = sorted(expected.values())
    assert min(b - a for a, b in itertools.pairwise(ordered)) > 1e-5, "the test needs distinguishable rewards"
    random.Random(1).shuffle(requests)
    responses = asyncio.run(post_concurrently(server.url, "/judge", requests))
    for request, response in zip(requests, responses, strict=True):
        body = response.json()
        assert body["request_id"] == request["request_id"]
        assert body["metadata"]["raw_reward"] == pytest.approx(expected[request["request_id"]], abs=1e-6)


def test_concurrent_requests_share_model_calls(server):
    batches_before = metric_value(server.url, "judge_batch_size_count")
    judged_before = metric_value(server.url, "judge_batch_size_sum")
    responses = asyncio.run(post_concurrently(server.url, "/judge", varied_requests(16, seed=2)))
    assert all(r.status_code == 200 for r in responses)
    batches = metric_value(server.url, "judge_batch_size_count") - batches_before
    assert metric_value(server.url, "judge_batch_size_sum") - judged_before == 16
    assert 1 <= batches < 16
    assert max(r.json()["metadata"]["batch_size"] for r in responses) > 1


def test_batch_judge_answers_in_order_with_request_ids(server):
    requests = varied_requests(6, seed=3)
    for request in requests[::2]:
        del request["request_id"]
    body = httpx.post(f"{server.url}/batch_judge", json={"requests": requests}, timeout=60).json()
    responses = body["responses"]
    assert [r["request_id"] for r in responses[1::2]] == [r["request_id"] for r in requests[1::2]]
    generated = [r["request_id"] for r in responses[::2]]
    assert len(set(generated)) == 3 and all(len(i) == 32 for i in generated)
    single = httpx.post(f"{server.url}/judge", json=requests[1]).json()
    assert responses[1]["score"] == pytest.approx(single["score"], abs=1e-6)


def test_a_batch_item_too_long_for_the_model_fails_alone(server):
    too_long = " ".join(random.Random(4).choices(WORDS, k=600))
    requests = [
        {"prompt": "Hi", "completion": "Hello", "request_id": "short"},
        {"prompt": "Hi", "completion": too_long, "request_id": "long"},
    ]
    responses = httpx.post(f"{server.url}/batch_judge", json={"requests": requests}, timeout=60).json()["responses"]
    assert responses[0]["error"] is None and 0 <= responses[0]["score"] <= 1
    assert responses[1]["request_id"] == "long" and responses[1]["score"] is None
    assert f"longer than --max-input-tokens {MAX_INPUT_TOKENS}" in responses[1]["error"]


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


def comparisons(count: int, seed: int) -> list[dict]:
    """Comparison requests of varied lengths, each with its own id."""
    judged = varied_requests(2 * count, seed)
    return [
        {"prompt": a["prompt"], "response_a": a["completion"], "response_b": b["completion"], "request_id": f"cmp-{i}"}
        for i, (a, b) in enumerate(zip(judged[::2], judged[1::2], strict=True))
    ]


def test_compare_is_the_bradley_terry_probability_of_the_raw_rewards(server, tiny_scalar_judge_dir):
    requests = comparisons(8, seed=5)
    responses_alone = [
        {"prompt": r["prompt"], "completion": r[side], "request_id": f"{r['request_id']}-{side}"}
        for r in requests
        for side in ("response_a", "response_b")
    ]
    rewards = unbatched_rewards(tiny_scalar_judge_dir, responses_alone)
    ok_before = metric_value(server.url, "judge_comparisons_total", {"outcome": "ok"})
    body = httpx.post(f"{server.url}/batch_compare", json={"requests": requests}, timeout=60).json()
    for request, answer in zip(requests, body["responses"], strict=True):
        reward_a, reward_b = (rewards[f"{request['request_id']}-{side}"] for side in ("response_a", "response_b"))
        assert answer["request_id"] == request["request_id"] and answer["error"] is None
        assert answer["score"] == pytest.approx(sigmoid(reward_a - reward_b), abs=1e-6)
        assert (answer["metadata"]["raw_reward_a"], answer["metadata"]["raw_reward_b"]) == pytest.approx(
            (reward_a, reward_b), abs=1e-6
        )
    assert metric_value(server.url, "judge_comparisons_total", {"outcome": "ok"}) - ok_before == 8
    swapped = {**requests[0], "response_a": requests[0]["response_b"], "response_b": requests[0]["response_a"]}
    single = httpx.post(f"{server.url}/compare", json=swapped, timeout=60).json()
    assert single["score"] == pytest.approx(1 - body["responses"][0]["score"], abs=1e-6)
    assert single["metadata"]["judge"] == "scalar" and single["explanation"].endswith("score = sigmoid(a - b)")


def test_a_comparison_over_a_limit_fails_alone_naming_the_response(server):
    requests = [
        {"prompt": "Hi", "response_a": "Hello", "response_b": "x" * (MAX_TEXT_CHARS + 1), "request_id": "chars"},
        {"prompt": "Hi", "response_a": " ".join(["word"] * 600), "response_b": "Hey", "request_id": "tokens"},
        {"prompt": "Hi", "response_a": "Hello", "response_b": "Hey", "request_id": "fine"},
    ]
    chars, tokens, fine = httpx.post(f"{server.url}/batch_compare", json={"requests": requests}, timeout=60).json()[
        "responses"
    ]
    assert chars["score"] is None and chars["error"].startswith(f"response_b has {MAX_TEXT_CHARS + 1} characters")
    assert tokens["score"] is None and tokens["error"].startswith("response_a: judge input is")
    assert fine["error"] is None and 0 < fine["score"] < 1


BAD_REQUESTS = [
    ("/compare", {"prompt": "p", "response_a": "a"}, 422, '"loc":["body","response_b"],"msg":"Field required"'),
    ("/compare", {"prompt": "p", "response_a": 1, "response_b": "b"}, 422, '"loc":["body","response_a"]'),
    ("/batch_compare", {"requests": []}, 422, "at least 1 item"),
    (
        "/batch_compare",
        {"requests": [{"prompt": "p", "response_a": "a", "response_b": "b"}] * (MAX_BATCH_REQUESTS + 1)},
        413,
        f"the limit is {MAX_BATCH_REQUESTS} (--max-batch-requests)",
    ),
    (
        "/batch_compare",
        {"requests": [{"prompt": "p", "response_a": "a", "response_b": "b", "request_id": 1}] * 2},
        422,
        "requests[1].request_id '1' repeats an earlier one",
    ),
    ("/judge", {"prompt": "p"}, 422, "Field required"),
    ("/judge", {"prompt": 3, "completion": "c"}, 422, "valid string"),
    ("/judge", {"prompt": "p", "completion": ["c"]}, 422, "valid string"),
    (
        "/judge",
        {"prompt": [{"role": "robot", "content": "x"}], "completion": "c"},
        422,
        "'system', 'user' or 'assistant'",
    ),
    ("/judge", {"prompt": [], "completion": "c"}, 422, "List should have at least 1 item"),
    ("/judge", {"prompt": "p", "completion": "c", "request_id": "x" * 257}, 422, "at most 256 characters"),
    ("/batch_judge", {"requests": []}, 422, "at least 1 item"),
    ("/batch_judge", {"request": []}, 422, "Field required"),
    (
        "/batch_judge",
        {"requests": [{"prompt": "p", "completion": "c"}] * (MAX_BATCH_REQUESTS + 1)},
        413,
        f"the limit is {MAX_BATCH_REQUESTS} (--max-batch-requests)",
    ),
    (
        "/batch_judge",
        {"requests": [{"prompt": "p", "completion": "c", "request_id": "a"}] * 2},
        422,
        "request ids must be unique",
    ),
]


@pytest.mark.parametrize("path, body, status, reason", BAD_REQUESTS)
def test_bad_input_gets_4xx_with_the_reason(server, path, body, status, reason):
    response = httpx.post(f"{server.url}{path}", json=body)
    assert response.status_code == status
    assert reason in response.text


def test_malformed_and_oversized_bodies_are_refused(server):
    malformed = httpx.post(
        f"{server.url}/judge", content=b'{"prompt": "p", ', headers={"content-type": "application/json"}
    )
    assert malformed.status_code == 422 and "JSON decode error" in malformed.text
    huge = httpx.post(f"{server.url}/judge", content=b"x" * (MAX_BODY_BYTES + 1))
    assert huge.status_code == 413 and "--max-body-bytes" in huge.text

    def chunks():  # no Content-Length: the size is only known while reading
        for _ in range(MAX_BODY_BYTES // 1000 + 2):
            yield b" " * 1000

    chunked = httpx.post(f"{server.url}/judge", content=chunks(), headers={"content-type": "application/json"})
    assert chunked.status_code == 413 and "--max-body-bytes" in chunked.text


def test_unknown_routes_and_methods(server):
    assert httpx.get(f"{server.url}/nope").status_code == 404
    assert httpx.get(f"{server.url}/judge").status_code == 405


def test_openapi_schema_describes_the_api(server):
    schema = httpx.get(f"{server.url}/openapi.json").json()
    assert {"/judge", "/batch_judge", "/compare", "/batch_compare", "/health", "/metrics"} <= set(schema["paths"])
    assert set(schema["components"]["schemas"]["JudgeRequest"]["required"]) == {"prompt", "completion"}
    assert set(schema["components"]["schemas"]["CompareRequest"]["required"]) == {"prompt", "response_a", "response_b"}
    assert "probability that response_a is better" in schema["paths"]["/compare"]["post"]["summary"]
    compare_score = schema["components"]["schemas"]["CompareResponse"]["properties"]["score"]
    assert compare_score["description"].startswith("the probability that response_a is better")


def test_metrics_count_requests_errors_and_latency(server):
    """Measured as deltas around this test's own requests: they hold whatever ran before."""
    counted = {
        "refused": ("judge_http_requests_total", {"route": "/judge", "status": "422"}),
        "answered": ("judge_http_requests_total", {"route": "/judge", "status": "200"}),
        "timed": ("judge_http_request_seconds_count", {"route": "/judge"}),
        "seconds": ("judge_http_request_seconds_sum", {"route": "/judge"}),
        "ok": ("judge_judgements_total", {"outcome": "ok"}),
        "error": ("judge_judgements_total", {"outcome": "error"}),
        "judged in batches": ("judge_batch_size_sum", None),
        "batch seconds": ("judge_batch_seconds_count", None),
    }
    before = {key: metric_value(server.url, name, labels) for key, (name, labels) in counted.items()}
    assert httpx.post(f"{server.url}/judge", json={"prompt": "p"}).status_code == 422
    too_long = {"prompt": "Hi", "completion": " ".join(["word"] * (MAX_INPUT_TOKENS + 10))}
    assert httpx.post(f"{server.url}/judge", json=too_long, timeout=60).json()["error"] is not None
    assert (
        httpx.post(f"{server.url}/judge", json={"prompt": "Hi", "completion": "Hello"}, timeout=60).json()["error"]
        is None
    )
    delta = {key: metric_value(server.url, name, labels) - before[key] for key, (name, labels) in counted.items()}
    assert delta.pop("seconds") > 0
    assert delta == {
        "refused": 1,
        "answered": 2,
        "timed": 3,
        "ok": 1,
        "error": 1,
        "judged in batches": 2,
        "batch seconds": 2,
    }
    assert "judge_queue_depth " in httpx.get(f"{server.url}/metrics").text


def test_server_survives_everything(server):
    """Bad requests, malformed and oversized bodies and a client that hangs up mid-body, sent by this test
    itself, leave the server answering the next request."""
    for path, body, _, _ in BAD_REQUESTS:  # their statuses are test_bad_input_gets_4xx_with_the_reason's concern
        assert httpx.post(f"{server.url}{path}", json=body, timeout=60).status_code < 500
    headers = {"content-type": "application/json"}
    assert httpx.post(f"{server.url}/judge", content=b'{"prompt": ', headers=headers).status_code == 422
    assert httpx.post(f"{server.url}/judge", content=b"x" * (MAX_BODY_BYTES + 1)).status_code == 413
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as hung_up:
        hung_up.sendall(b"POST /judge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
        hung_up.sendall(b'Content-Length: 1000\r\n\r\n{"prompt": "p", "completion": ')
    answered_before = httpx.get(f"{server.url}/health").json()["judgements_answered"]
    response = httpx.post(f"{server.url}/judge", json={"prompt": "Hi", "completion": "Hello"}, timeout=60)
    assert response.status_code == 200 and response.json()["error"] is None
    health = httpx.get(f"{server.url}/health").json()
    assert server.process.poll() is None
    assert (health["queue_depth"], health["judgements_answered"]) == (0, answered_before + 1)
