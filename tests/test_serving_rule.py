"""The real judge server with the rule judge: API-key auth, a batch mixing scores and per-item errors,
and --no-batching (one judgement per model call)."""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from tests.support.servers import start_server
from tests.test_serving_scalar import assert_clean_shutdown, metric_value, post_concurrently

API_KEY = "test-secret"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = start_server(
        ["--judge", "rule"],
        log_path=tmp_path_factory.mktemp("rule_server") / "server.log",
        env={**os.environ, "JUDGE_SERVER_API_KEY": API_KEY},
    )
    yield running
    assert_clean_shutdown(running)


@pytest.fixture(scope="module")
def unbatched_server(tmp_path_factory):
    running = start_server(
        ["--judge", "rule", "--no-batching"], log_path=tmp_path_factory.mktemp("unbatched_server") / "server.log"
    )
    yield running
    assert_clean_shutdown(running)


def test_health_needs_no_key(server):
    health = httpx.get(f"{server.url}/health").json()
    assert (health["judge_kind"], health["backend"]) == ("rule", "rules")


def test_health_answers_head_for_load_balancers(server):
    response = httpx.head(f"{server.url}/health")
    assert response.status_code == 200 and response.content == b""


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", "/judge"),
        ("POST", "/batch_judge"),
        ("GET", "/metrics"),
        ("HEAD", "/metrics"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/redoc"),
        ("OPTIONS", "/judge"),  # no CORS is configured, so a preflight needs the key like any request
        ("GET", "/nope"),
    ],
)
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}],
    ids=["no-key", "wrong-key", "no-bearer"],
)
def test_every_other_route_needs_the_key(server, method, path, headers):
    response = httpx.request(method, f"{server.url}{path}", headers=headers, json={})
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    if method != "HEAD":
        assert "Authorization: Bearer <key>" in response.json()["detail"]


def test_the_key_opens_the_routes(server):
    for path in ("/metrics", "/docs", "/redoc", "/openapi.json"):
        assert httpx.get(f"{server.url}{path}", headers=AUTH).status_code == 200
    response = httpx.post(
        f"{server.url}/judge",
        headers=AUTH,
        json={
            "prompt": "What is 2+2?",
            "completion": "The answer is **boxed{4}**",
            "answer": "4",
            "answer_type": "NUMBER",
            "request_id": "unique_id",
        },
    )
    body = response.json()
    assert (body["score"], body["request_id"], body["error"]) == (1.0, "unique_id", None)
    assert body["explanation"] and body["metadata"]["answer_type"] == "NUMBER"


def test_a_batch_mixes_scores_and_per_item_errors(server):
    requests = [
        {"prompt": "2+2?", "completion": "The answer is 4", "answer": "4", "answer_type": "NUMBER"},
        {"prompt": "2+2?", "completion": "The answer is 5", "answer": "4"},
        {"prompt": "2+2?", "completion": "The answer is 4"},
        {"prompt": "Pick one", "completion": "The answer is (B)", "answer": "B", "answer_type": "COLOR"},
        {"prompt": "Pick one", "completion": "The answer is (B)", "answer": "B", "answer_type": "MULTIPLE_CHOICE"},
    ]
    response = httpx.post(f"{server.url}/batch_judge", headers=AUTH, json={"requests": requests})
    assert response.status_code == 200
    responses = response.json()["responses"]
    assert [r["score"] for r in responses] == [1.0, 0.0, None, None, 1.0]
    assert [r["error"] is None for r in responses] == [True, True, False, False, True]  # a real 0 is no error
    assert "no reference answer" in responses[2]["error"]
    assert "answer_type 'COLOR'" in responses[3]["error"]
    assert len({r["request_id"] for r in responses}) == 5


def test_metrics_histogram_the_scores_and_leave_out_errors(server):
    def buckets():
        return {
            le: metric_value(server.url, "judge_score_bucket", {"kind": "judgement", "le": le}, headers=AUTH)
            for le in LES
        }

    LES = ("0.1", "0.9", "+Inf")
    before = buckets()
    requests = [
        {"prompt": "2+2?", "completion": f"The answer is {n}", "answer": "4", "answer_type": "NUMBER"}
        for n in (3, 4, 4)
    ] + [{"prompt": "2+2?", "completion": "The answer is 4"}]  # no reference: an error, no score
    assert httpx.post(f"{server.url}/batch_judge", headers=AUTH, json={"requests": requests}).status_code == 200
    after = buckets()
    assert {le: after[le] - before[le] for le in LES} == {"0.1": 1, "0.9": 1, "+Inf": 3}


def test_no_batching_runs_one_judgement_per_model_call(unbatched_server):
    assert httpx.get(f"{unbatched_server.url}/health").json()["max_batch_size"] == 1
    batches_before = metric_value(unbatched_server.url, "judge_batch_size_count")
    bodies = [
        {"prompt": "2+2?", "completion": f"The answer is {n}", "answer": "4", "request_id": str(n)} for n in range(12)
    ]
    responses = asyncio.run(post_concurrently(unbatched_server.url, "/judge", bodies))
    assert [r.json()["score"] for r in responses] == [float(n == 4) for n in range(12)]
    assert metric_value(unbatched_server.url, "judge_batch_size_count") - batches_before == 12
    assert all(r.json()["metadata"]["batch_size"] == 1 for r in responses)
