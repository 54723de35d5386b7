"""The judge on Ray Serve for real: two CPU replicas of the tiny scalar judge on a private local Ray
cluster, the same HTTP API and auth, and nothing of the cluster left once the server stops."""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import tempfile

import httpx
import pytest

from tests.support.servers import start_server
from tests.test_serving_scalar import post_concurrently, unbatched_rewards, varied_requests

REPLICAS = 2
API_KEY = "ray-secret"
AUTH = {"Authorization": f"Bearer {API_KEY}"}

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def ray_temp_dir():
    """Ray's session files (logs, sockets) in a directory of this test; short, for Ray's socket paths."""
    path = tempfile.mkdtemp(prefix="ray-test-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def server(tiny_scalar_judge_dir, ray_temp_dir, tmp_path_factory):
    running = start_server(
        [
            "--model",
            str(tiny_scalar_judge_dir),
            "--replicas",
            str(REPLICAS),
            "--num-cpus-per-replica",
            "0.5",
            "--ray-num-cpus",
            "2",
            "--max-batch-size",
            "8",
            "--batch-timeout",
            "0.2",
        ],
        log_path=tmp_path_factory.mktemp("ray_server") / "server.log",
        module="serving.ray_serve",
        env={**os.environ, "RAY_TMPDIR": ray_temp_dir, "JUDGE_SERVER_API_KEY": API_KEY},
    )
    yield running
    assert running.stop() == 0
    # signal 0 probes the group: GCS, raylet and replicas are gone too
    with pytest.raises(ProcessLookupError, match="No such process"):
        os.killpg(running.process.pid, 0)


def test_replicas_serve_the_same_api(server, tiny_scalar_judge_dir):
    requests = varied_requests(24, seed=7)
    expected = unbatched_rewards(tiny_scalar_judge_dir, requests)
    responses = asyncio.run(post_concurrently(server.url, "/judge", requests, headers=AUTH))
    for request, response in zip(requests, responses, strict=True):
        body = response.json()
        assert body["request_id"] == request["request_id"]
        assert body["metadata"]["raw_reward"] == pytest.approx(expected[request["request_id"]], abs=1e-6)
    assert max(r.json()["metadata"]["batch_size"] for r in responses) > 1  # @serve.batch formed batches

    batch = httpx.post(f"{server.url}/batch_judge", json={"requests": requests[:4]}, headers=AUTH, timeout=60)
    batch = batch.json()["responses"]
    assert [r["request_id"] for r in batch] == [r["request_id"] for r in requests[:4]]

    first, second = requests[:2]
    comparison = {"prompt": first["prompt"], "response_a": first["completion"], "response_b": second["completion"]}
    compared = httpx.post(f"{server.url}/batch_compare", json={"requests": [comparison]}, headers=AUTH, timeout=60)
    reward_a = unbatched_rewards(tiny_scalar_judge_dir, [{**first, "request_id": "a"}])["a"]
    reward_b = unbatched_rewards(tiny_scalar_judge_dir, [{**second, "prompt": first["prompt"], "request_id": "b"}])["b"]
    assert compared.json()["responses"][0]["score"] == pytest.approx(1 / (1 + math.exp(reward_b - reward_a)), abs=1e-6)


def test_every_replica_answers(server):
    async def replicas_seen() -> set[str]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            seen = set()
            for _ in range(20):  # bounded: idle replicas are picked at random, so both show up quickly
                responses = await asyncio.gather(*(client.get("/health") for _ in range(8)))
                seen |= {r.json()["replica"] for r in responses}
                if len(seen) == REPLICAS:
                    break
            return seen

    assert len(asyncio.run(replicas_seen())) == REPLICAS
    health = httpx.get(f"{server.url}/health").json()
    assert (health["judge_kind"], health["max_batch_size"]) == ("scalar", 8)


def test_replicas_need_the_key_on_every_route_but_health(server):
    for method, path in (("POST", "/judge"), ("POST", "/batch_judge"), ("GET", "/metrics"), ("GET", "/docs")):
        assert httpx.request(method, f"{server.url}{path}", json={}, timeout=60).status_code == 401
    assert httpx.head(f"{server.url}/health", timeout=60).status_code == 200
