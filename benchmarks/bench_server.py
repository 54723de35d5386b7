"""Benchmark 1: judge server throughput and latency with dynamic batching vs one request at a time.

    python -m benchmarks.bench_server --base-model runs/demo/models/smollm2

A scalar judge (the base model with a fresh one-label head: the BT export format; its weights do not
change the cost) is served by `python -m serving` three times: with --no-batching (one judgement per
model call, the way peers serve rewards), with the default dynamic batching (max_batch_size 16,
batch_timeout 0.05 s: a batch waits up to 50 ms for more judgements after its first one arrived), and
with --batch-timeout 0 (no waiting: a batch is whatever queued while the model was busy). At each
concurrency level, that many clients keep one POST /judge each in flight until the same fixed set of
requests is answered. The client runs on the same machine as the server and takes some of its CPU, in
every mode alike.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import markdown_table, percentile, write_results
from tests.support.models import build_scalar_judge
from tests.support.servers import start_server

WORDS = [
    "the",
    "answer",
    "explains",
    "why",
    "the",
    "result",
    "holds",
    "and",
    "gives",
    "each",
    "step",
    "of",
    "the",
    "reasoning",
    "with",
    "care",
    "so",
    "that",
    "a",
    "reader",
    "can",
    "check",
    "every",
    "claim",
    "against",
    "the",
    "question",
    "about",
    "capitals",
    "numbers",
    "units",
    "and",
    "facts",
]
BASELINE = "no batching"
MODES = {
    BASELINE: ["--no-batching"],
    "batching, batch_timeout 0.05": [],
    "batching, batch_timeout 0": ["--batch-timeout", "0"],
}


def request_bodies(count: int, seed: int) -> list[dict]:
    """Reward requests shaped like RL rollouts: a short prompt and a completion of 20-150 words."""
    rng = random.Random(seed)
    return [
        {
            "prompt": " ".join(rng.choices(WORDS, k=rng.randint(8, 30))),
            "completion": " ".join(rng.choices(WORDS, k=rng.randint(20, 150))),
            "request_id": f"bench-{i}",
        }
        for i in range(count)
    ]


async def closed_loop(url: str, bodies: list[dict], concurrency: int) -> tuple[list[float], float]:
    """Latencies of every request and the wall time, with `concurrency` requests in flight."""
    queue = list(reversed(bodies))
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client(session: httpx.AsyncClient) -> None:
        while queue:
            body = queue.pop()
            started = time.perf_counter()
            response = await session.post(f"{url}/judge", json=body)
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()
            if response.json()["score"] is None:
                raise RuntimeError(f"judge failed: {response.text}")

    async with httpx.AsyncClient(limits=limits, timeout=600) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        return latencies, time.perf_counter() - started


def model_calls(url: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "judge_batch_size_count":
                return int(sample.value)
    raise RuntimeError("the server's /metrics has no judge_batch_size_count")


def measure_mode(
    judge_dir: Path, flags: list[str], bodies: list[dict], levels: list[int], warmup: list[dict]
) -> list[dict]:
    rows = []
    log_path = judge_dir.parent / "server.log"
    with start_server(["--model", str(judge_dir), "--log-level", "warning", *flags], log_path=log_path) as server:
        asyncio.run(closed_loop(server.url, warmup, 4))
        for concurrency in levels:
            calls_before = model_calls(server.url)
            latencies, wall = asyncio.run(closed_loop(server.url, bodies, concurrency))
            calls = model_calls(server.url) - calls_before
            rows.append(
                {
                    "concurrency": concurrency,
                    "requests": len(bodies),
                    "wall_s": round(wall, 2),
                    "requests_per_s": round(len(bodies) / wall, 2),
                    "p50_ms": round(percentile(latencies, 50) * 1000, 1),
                    "p99_ms": round(percentile(latencies, 99) * 1000, 1),
                    "model_calls": calls,
                    "mean_batch_size": round(len(bodies) / calls, 2),
                }
            )
            print(rows[-1], flush=True)
    return rows


def report(results: dict[str, list[dict]]) -> str:
    rows = []
    for level, baseline in enumerate(results[BASELINE]):
        for mode, measured in results.items():
            row = measured[level]
            rows.append(
                [
                    row["concurrency"],
                    mode,
                    row["requests_per_s"],
                    f"{row['requests_per_s'] / baseline['requests_per_s']:.2f}x",
                    row["p50_ms"],
                    row["p99_ms"],
                    row["mean_batch_size"],
                ]
            )
    headers = ["concurrency", "server", "req/s", "vs no batching", "p50 ms", "p99 ms", "mean batch"]
    return "## Judge server: dynamic batching vs one request at a time\n\n" + markdown_table(headers, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-model", required=True, help="HF causal LM directory the scalar judge is built from")
    parser.add_argument("--requests", type=int, default=128, help="requests answered per concurrency level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 128], help="clients in flight")
    parser.add_argument("--seed", type=int, default=0, help="seed of the request texts")
    parser.add_argument("--name", default="server", help="name of the result files in benchmarks/results/")
    args = parser.parse_args()

    bodies = request_bodies(args.requests, args.seed)
    warmup = request_bodies(8, args.seed + 1)
    with tempfile.TemporaryDirectory() as workdir:
        judge_dir = build_scalar_judge(args.base_model, Path(workdir) / "judge")
        results = {
            mode: measure_mode(judge_dir, flags, bodies, args.concurrency, warmup) for mode, flags in MODES.items()
        }
    config = {"base_model": args.base_model, "requests": args.requests, "seed": args.seed}
    paths = write_results(args.name, {"config": config, "results": results}, report(results))
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
