"""Benchmark 2: the reward adapter (JudgeRewardSystem) vs a naive client posting one request per reward.

    python -m benchmarks.bench_adapter                                 # rule judge: client overhead only
    python -m benchmarks.bench_adapter --base-model runs/demo/models/smollm2   # a model-backed scalar judge

Two measurements against the same running judge server (`python -m serving --batch-timeout 0`, so that
the server adds no batching wait of its own to either client):
1. Added latency: one caller, one reward at a time. The raw baseline is a plain POST /judge on a
   kept-alive connection; the adapter's reward() adds its queueing and, with batch_timeout > 0, the
   wait for other callers' requests to batch with (a lone caller waits for none to come).
2. Throughput: 64 threads ask for rewards at once (distinct items, cache off). The naive client posts
   one /judge per reward from each thread; the adapter coalesces them into /batch_judge requests.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import tempfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks.bench_server import request_bodies
from benchmarks.common import markdown_table, percentile, write_results
from judge_rewards import JudgeRewardSystem
from tests.support.models import build_scalar_judge
from tests.support.servers import start_server


def adapter_config(url: str, batch_timeout: float) -> dict:
    return {
        "judge_url": url,
        "use_cache": False,
        "max_batch_size": 16,
        "batch_timeout": batch_timeout,
        "max_concurrent_requests": 32,
        "timeout": 600,
        "fallback_to_rule": False,
        "max_retries": 0,
    }


def latency_stats(latencies: list[float]) -> dict:
    return {"p50_ms": round(percentile(latencies, 50) * 1000, 2), "p95_ms": round(percentile(latencies, 95) * 1000, 2)}


def raw_latencies(url: str, bodies: list[dict]) -> list[float]:
    latencies = []
    with httpx.Client(timeout=600) as session:
        for body in bodies:
            started = time.perf_counter()
            response = session.post(f"{url}/judge", json=body)
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()
    return latencies


def adapter_latencies(url: str, bodies: list[dict], batch_timeout: float) -> list[float]:
    latencies = []
    with JudgeRewardSystem(adapter_config(url, batch_timeout)) as adapter:
        for body in bodies:
            started = time.perf_counter()
            result = adapter.reward(body["prompt"], body["completion"], body.get("answer"))
            latencies.append(time.perf_counter() - started)
            assert result["source"] == "judge", result
    return latencies


def run_threads(callers: int, bodies: list[dict], reward_one) -> float:
    """Wall time for `callers` threads to get a reward for every body (each thread takes the next one)."""
    remaining = list(reversed(bodies))
    lock = threading.Lock()

    def caller():
        while True:
            with lock:
                if not remaining:
                    return
                body = remaining.pop()
            reward_one(body)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(callers) as pool:
        for future in [pool.submit(caller) for _ in range(callers)]:
            future.result()
    return time.perf_counter() - started


def naive_throughput(url: str, bodies: list[dict], callers: int) -> dict:
    local = threading.local()

    def reward_one(body):
        if not hasattr(local, "session"):
            local.session = httpx.Client(timeout=600)
        local.session.post(f"{url}/judge", json=body).raise_for_status()

    wall = run_threads(callers, bodies, reward_one)
    return {"rewards_per_s": round(len(bodies) / wall, 1), "http_requests": len(bodies), "batched_fraction": 0.0}


def adapter_throughput(url: str, bodies: list[dict], callers: int, batch_timeout: float) -> dict:
    with JudgeRewardSystem(adapter_config(url, batch_timeout)) as adapter:

        def reward_one(body):
            assert adapter.reward(body["prompt"], body["completion"], body.get("answer"))["source"] == "judge"

        wall = run_threads(callers, bodies, reward_one)
        metrics = adapter.get_metrics()
    return {
        "rewards_per_s": round(len(bodies) / wall, 1),
        "http_requests": metrics["batches_sent"],
        "batched_fraction": metrics["batched_fraction"],
        "mean_batch_size": metrics["mean_batch_size"],
    }


def with_answers(bodies: list[dict]) -> list[dict]:
    """The rule judge needs a reference answer; the completion ends with it half the time."""
    return [
        {
            **body,
            "completion": body["completion"] + (" so the answer is 4" if i % 2 else " so it is 5"),
            "answer": "4",
            "answer_type": "NUMBER",
        }
        for i, body in enumerate(bodies)
    ]


def report(results: dict) -> str:
    latency = results["added_latency"]
    latency_rows = [["raw POST /judge", latency["raw"]["p50_ms"], latency["raw"]["p95_ms"], "-"]]
    for name, stats in latency["adapter"].items():
        latency_rows.append(
            [name, stats["p50_ms"], stats["p95_ms"], round(stats["p50_ms"] - latency["raw"]["p50_ms"], 2)]
        )
    throughput = results["throughput"]
    naive = throughput["naive"]["rewards_per_s"]
    throughput_rows = [
        [
            name,
            row["rewards_per_s"],
            f"{row['rewards_per_s'] / naive:.2f}x",
            row["http_requests"],
            row["batched_fraction"],
        ]
        for name, row in throughput.items()
    ]
    return "\n\n".join(
        [
            f"## Reward adapter vs a naive client ({results['config']['judge']})",
            "### Added latency of one reward() (one caller, sequential)",
            markdown_table(["client", "p50 ms", "p95 ms", "added p50 ms"], latency_rows),
            f"### Rewards/s with {results['config']['callers']} concurrent callers",
            markdown_table(["client", "rewards/s", "vs naive", "HTTP requests", "batched fraction"], throughput_rows),
        ]
    )


def measure(url: str, args, judge: str) -> dict:
    bodies = with_answers(request_bodies(args.rewards, args.seed))
    sequential = bodies[: args.sequential]
    raw_latencies(url, sequential[:4])  # warm-up
    results = {
        "config": {"judge": judge, "callers": args.callers, "rewards": args.rewards, "sequential": args.sequential},
        "added_latency": {
            "raw": latency_stats(raw_latencies(url, sequential)),
            "adapter": {
                f"adapter, batch_timeout {t}": latency_stats(adapter_latencies(url, sequential, t))
                for t in args.batch_timeouts
            },
        },
        "throughput": {"naive": naive_throughput(url, bodies, args.callers)},
    }
    for timeout in args.batch_timeouts:
        name = f"adapter, batch_timeout {timeout}"
        results["throughput"][name] = adapter_throughput(url, bodies, args.callers, timeout)
    print(results, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-model", help="serve a scalar judge built from this causal LM; default: the rule judge")
    parser.add_argument("--rewards", type=int, default=512, help="rewards requested in the throughput test")
    parser.add_argument("--sequential", type=int, default=64, help="rewards timed one at a time (added latency)")
    parser.add_argument("--callers", type=int, default=64, help="concurrent caller threads")
    parser.add_argument(
        "--batch-timeouts",
        type=float,
        nargs="+",
        default=[0.05, 0.0],
        help="adapter batch_timeout values to measure (0.05 is the seed's default)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default=None, help="result file name (default: adapter_<judge>)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as workdir:
        if args.base_model:
            judge = f"scalar judge from {Path(args.base_model).name}"
            server_args = ["--model", str(build_scalar_judge(args.base_model, Path(workdir) / "judge"))]
        else:
            judge, server_args = "rule judge", ["--judge", "rule"]
        with start_server(
            [*server_args, "--batch-timeout", "0", "--log-level", "warning"], log_path=Path(workdir) / "server.log"
        ) as server:
            results = measure(server.url, args, judge)
    name = args.name or ("adapter_scalar" if args.base_model else "adapter_rule")
    paths = write_results(name, results, report(results))
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
