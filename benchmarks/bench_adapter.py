"""Benchmark 2: the reward adapter (JudgeRewardSystem) vs a naive client and a verl batch reward function.

    python -m benchmarks.bench_adapter                                           # rule judge: client costs, ~1 min
    python -m benchmarks.bench_adapter --base-model runs/demo/models/smollm2     # a model-backed scalar judge, ~7 min
    python -m benchmarks.bench_adapter --smoke --results-dir /tmp/results        # a quick check

Every client talks to the same running judge server (`python -m serving --batch-timeout 0`, so that the
server adds no batching wait of its own to any of them). Two measurements:
1. Added latency: one caller, one reward at a time (--sequential rewards). The raw baseline is a plain POST
   /judge on a kept-alive connection; the adapter's reward() adds its queueing and, with batch_timeout > 0,
   the wait for other callers' requests to batch with (a lone caller waits for none to come).
2. Throughput: --rewards distinct rewards (cache off), got by
   - naive: --callers threads, each posting one /judge per reward (its own kept-alive connection);
   - verl batch: what a verl user writes in `compute_score_batch` without the adapter. verl's batch reward
     manager hands the function --verl-batch samples at a time, one call after another; the function posts
     them to /batch_judge in chunks of the server's --max-batch-requests (serving's default, 1024: a batch
     of 256 is one request), up to --concurrent-chunks (4) chunks in flight, all on one kept-alive
     httpx.Client;
   - the adapter as verl drives it: compute_score_batch (judge_rewards.verl_reward) hands the same batches
     of --verl-batch samples to reward_batch(), which sends them as /batch_judge requests of up to 16;
   - the adapter, batch_timeout 0.05 (the seed's default) and 0: --callers threads each calling reward(),
     which coalesces them into /batch_judge requests of up to 16.
   HTTP requests are counted by the server (its /metrics), not by the clients.

Each measurement runs --repetitions times (5); every repetition runs each of its clients once, their order
rotated from one repetition to the next (A B C, B C A, ...). The results give medians and ranges, ratios of
medians, and the 1-minute load average before every run. Default sizes: 512 rewards and 64 sequential ones with
the rule judge; with --base-model 96 and 16 (SmolLM2-135M scores ~7 per second on a 2-core CPU: 5 x 4 x 96
rewards take ~5 minutes, the sequential ones ~1).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from benchmarks.bench_server import request_bodies, server_metric
from benchmarks.common import (
    RESULTS_DIR,
    RunLog,
    add_ratios,
    exit_on_sigterm,
    load_averages,
    markdown_table,
    median_and_range,
    percentile,
    rotated,
    summarize_runs,
    write_results,
)
from judge_rewards import JudgeRewardSystem
from serving.config import ServingConfig
from tests.support.models import build_scalar_judge
from tests.support.servers import start_server

ADAPTER_MAX_BATCH_SIZE = 16
RAW = "raw POST /judge"
NAIVE = "naive"
VERL_BATCH = "verl batch"
ADAPTER_VERL = "adapter reward_batch (verl_reward), batch_timeout 0.05"
JUDGE_ITEM_KEYS = ("prompt", "completion", "answer", "answer_type")
DEFAULTS = {
    "repetitions": 5,
    "callers": 64,
    "verl_batch": 256,
    "max_batch_requests": ServingConfig().max_batch_requests,
    "concurrent_chunks": 4,
}
SIZES = {"rule": {"rewards": 512, "sequential": 64}, "model": {"rewards": 96, "sequential": 16}}
SMOKE = {
    "repetitions": 2,
    "callers": 16,
    "verl_batch": 40,
    "max_batch_requests": 16,
    "concurrent_chunks": 2,
    "rewards": 96,
    "sequential": 8,
}


def adapter_name(batch_timeout: float) -> str:
    return f"adapter, batch_timeout {batch_timeout}"


def adapter_config(url: str, batch_timeout: float) -> dict:
    return {
        "judge_url": url,
        "use_cache": False,
        "max_batch_size": ADAPTER_MAX_BATCH_SIZE,
        "batch_timeout": batch_timeout,
        "max_concurrent_requests": 32,
        "timeout": 600,
        "fallback_to_rule": False,
        "max_retries": 0,
    }


def judge_http_requests(url: str) -> int:
    """POST /judge and /batch_judge requests the server has answered so far."""
    return int(
        sum(server_metric(url, "judge_http_requests_total", route=route) for route in ("/judge", "/batch_judge"))
    )


# --- added latency: one caller --------------------------------------------------------------------------


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


# --- throughput -----------------------------------------------------------------------------------------


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


def naive_throughput(url: str, bodies: list[dict], args: argparse.Namespace) -> dict:
    local = threading.local()

    def reward_one(body):
        if not hasattr(local, "session"):
            local.session = httpx.Client(timeout=600)
        local.session.post(f"{url}/judge", json=body).raise_for_status()

    wall = run_threads(args.callers, bodies, reward_one)
    return {"wall_s": round(wall, 4)}


def slices(items: list, size: int) -> list[list]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def post_chunk(session: httpx.Client, url: str, chunk: list[dict]) -> list[float]:
    response = session.post(f"{url}/batch_judge", json={"requests": chunk})
    response.raise_for_status()
    answers = response.json()["responses"]
    if [answer["request_id"] for answer in answers] != [body["request_id"] for body in chunk]:
        raise RuntimeError(f"/batch_judge answered other requests than it was sent: {response.text[:500]}")
    failed = [answer for answer in answers if answer["score"] is None]
    if failed:
        raise RuntimeError(f"the judge failed {len(failed)} of {len(chunk)} items, e.g. {failed[0]}")
    return [answer["score"] for answer in answers]


def verl_batch_throughput(url: str, bodies: list[dict], args: argparse.Namespace) -> dict:
    """verl calls compute_score_batch once per batch of --verl-batch samples, one batch after another; the
    function splits its batch into chunks the server accepts and posts them, a few at once."""
    chunks_in_flight = args.concurrent_chunks
    limits = httpx.Limits(max_connections=chunks_in_flight, max_keepalive_connections=chunks_in_flight)
    with (
        httpx.Client(timeout=600, limits=limits) as session,
        concurrent.futures.ThreadPoolExecutor(chunks_in_flight) as pool,
    ):
        started = time.perf_counter()
        for batch in slices(bodies, args.verl_batch):
            list(pool.map(functools.partial(post_chunk, session, url), slices(batch, args.max_batch_requests)))
        wall = time.perf_counter() - started
    return {"wall_s": round(wall, 4)}


def adapter_throughput(batch_timeout: float) -> Callable[[str, list[dict], argparse.Namespace], dict]:
    def measure(url: str, bodies: list[dict], args: argparse.Namespace) -> dict:
        with JudgeRewardSystem(adapter_config(url, batch_timeout)) as adapter:

            def reward_one(body):
                assert adapter.reward(body["prompt"], body["completion"], body.get("answer"))["source"] == "judge"

            wall = run_threads(args.callers, bodies, reward_one)
            metrics = adapter.get_metrics()
        return {
            "wall_s": round(wall, 4),
            "batches_sent": metrics["batches_sent"],
            "batched_fraction": metrics["batched_fraction"],
            "mean_batch_size": metrics["mean_batch_size"],
        }

    return measure


def adapter_verl_throughput(url: str, bodies: list[dict], args: argparse.Namespace) -> dict:
    """The adapter as verl's batch reward manager drives it (judge_rewards.verl_reward.compute_score_batch calls
    reward_batch): --verl-batch samples per call, one call after another, the seed's batch_timeout."""
    with JudgeRewardSystem(adapter_config(url, 0.05)) as adapter:
        started = time.perf_counter()
        for batch in slices(bodies, args.verl_batch):
            items = [
                {key: body.get(key) for key in ("prompt", "completion", "answer", "answer_type")} for body in batch
            ]
            assert all(reward["source"] == "judge" for reward in adapter.reward_batch(items))
        wall = time.perf_counter() - started
        metrics = adapter.get_metrics()
    return {"wall_s": round(wall, 4), "batches_sent": metrics["batches_sent"]}


def throughput_run(url: str, bodies: list[dict], args: argparse.Namespace, client) -> dict:
    requests_before = judge_http_requests(url)
    run = client(url, bodies, args)
    return {
        "rewards_per_s": round(len(bodies) / run["wall_s"], 1),
        "http_requests": judge_http_requests(url) - requests_before,
        **run,
    }


# --- the measurement ------------------------------------------------------------------------------------


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


def measure(url: str, args: argparse.Namespace) -> dict:
    """Both measurements, repeated; in each repetition the clients run in turn (rotated)."""
    bodies = with_answers(request_bodies(args.rewards, args.seed))
    sequential = bodies[: args.sequential]
    latency_clients = {RAW: lambda: raw_latencies(url, sequential)}
    throughput_clients = {
        NAIVE: naive_throughput,
        VERL_BATCH: verl_batch_throughput,
        ADAPTER_VERL: adapter_verl_throughput,
    }
    for timeout in args.batch_timeouts:
        latency_clients[adapter_name(timeout)] = lambda t=timeout: adapter_latencies(url, sequential, t)
        throughput_clients[adapter_name(timeout)] = adapter_throughput(timeout)
    raw_latencies(url, sequential[:4])  # warm-up
    latency_runs = {name: [] for name in latency_clients}
    throughput_runs = {name: [] for name in throughput_clients}
    log = RunLog()
    for repetition in range(args.repetitions):
        for name in rotated(list(latency_clients), repetition):
            stamp = log.start(repetition)
            latency_runs[name].append({**stamp, **latency_stats(latency_clients[name]())})
        for name in rotated(list(throughput_clients), repetition):
            stamp = log.start(repetition)
            run = throughput_run(url, bodies, args, throughput_clients[name])
            throughput_runs[name].append({**stamp, **run})
            print(name, throughput_runs[name][-1], flush=True)
    latency = {name: summarize_runs(runs, ("p50_ms", "p95_ms")) for name, runs in latency_runs.items()}
    for result in latency.values():
        result["added_p50_ms"] = round(result["p50_ms"]["median"] - latency[RAW]["p50_ms"]["median"], 2)
    throughput = {
        name: summarize_runs(runs, ("rewards_per_s", "http_requests")) for name, runs in throughput_runs.items()
    }
    add_ratios(throughput, "rewards_per_s", NAIVE)
    add_ratios(throughput, "rewards_per_s", VERL_BATCH, "verl_batch")
    return {"added_latency": latency, "throughput": throughput}


def http_requests_cell(requests: dict) -> str:
    return str(requests["min"]) if requests["min"] == requests["max"] else f"{requests['min']}-{requests['max']}"


def report(results: dict, config: dict) -> str:
    latency_rows = [
        [name, median_and_range(r["p50_ms"], 2), f"{r['p95_ms']['median']:.2f}", f"{r['added_p50_ms']:+.2f}"]
        for name, r in results["added_latency"].items()
    ]
    throughput_rows = [
        [
            name,
            median_and_range(r["rewards_per_s"]),
            f"{r['rewards_per_s_vs_naive']:.2f}x",
            f"{r['rewards_per_s_vs_verl_batch']:.2f}x",
            http_requests_cell(r["http_requests"]),
        ]
        for name, r in results["throughput"].items()
    ]
    runs = [run for part in results.values() for result in part.values() for run in result["runs"]]
    return "\n\n".join(
        [
            f"## Reward adapter vs a naive client and a verl batch reward function ({config['judge']})",
            f"{config['repetitions']} repetitions, the clients interleaved in each.",
            f"### Added latency of one reward() (one caller, {config['sequential']} rewards one after another)",
            markdown_table(["client", "p50 ms: median (min-max)", "p95 ms: median", "added p50 ms"], latency_rows),
            f"### Rewards/s: {config['rewards']} rewards; naive and adapter: {config['callers']} caller threads; "
            f"verl batch: batches of {config['verl_batch']}, chunks of {config['max_batch_requests']}, "
            f"{config['concurrent_chunks']} in flight",
            markdown_table(
                ["client", "rewards/s: median (min-max)", "vs naive", "vs verl batch", "HTTP requests"],
                throughput_rows,
            ),
            load_averages(runs),
        ]
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-model", help="serve a scalar judge built from this causal LM; default: the rule judge")
    parser.add_argument("--smoke", action="store_true", help=f"small sizes for a quick check: {SMOKE}")
    parser.add_argument("--repetitions", type=int, help=f"runs of every client (default {DEFAULTS['repetitions']})")
    parser.add_argument("--rewards", type=int, help=f"rewards per throughput run (default {SIZES})")
    parser.add_argument("--sequential", type=int, help="rewards timed one at a time (added latency)")
    parser.add_argument(
        "--callers", type=int, help=f"caller threads, naive and adapter (default {DEFAULTS['callers']})"
    )
    parser.add_argument("--verl-batch", type=int, help=f"samples per verl batch (default {DEFAULTS['verl_batch']})")
    parser.add_argument(
        "--max-batch-requests",
        type=int,
        help=f"the server's limit of requests per /batch_judge, the verl batch's chunk size "
        f"(default serving's, {DEFAULTS['max_batch_requests']})",
    )
    parser.add_argument(
        "--concurrent-chunks",
        type=int,
        help=f"verl batch: chunks in flight at once (default {DEFAULTS['concurrent_chunks']})",
    )
    parser.add_argument(
        "--batch-timeouts",
        type=float,
        nargs="+",
        default=[0.05, 0.0],
        help="adapter batch_timeout values to measure (0.05 is the seed's default)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default=None, help="result file name (default: adapter_rule or adapter_scalar)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the result files go")
    args = parser.parse_args()
    defaults = SMOKE if args.smoke else {**DEFAULTS, **SIZES["model" if args.base_model else "rule"]}
    for key, default in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    if min(args.repetitions, args.rewards, args.sequential, args.callers, args.verl_batch, args.concurrent_chunks) < 1:
        raise SystemExit("--repetitions, --rewards, --sequential, --callers, --verl-batch, --concurrent-chunks: >= 1")
    if args.sequential > args.rewards:
        raise SystemExit(f"--sequential {args.sequential} is more than --rewards {args.rewards}")
    if args.max_batch_requests < ADAPTER_MAX_BATCH_SIZE:
        raise SystemExit(
            f"--max-batch-requests {args.max_batch_requests} is below the adapter's batches of {ADAPTER_MAX_BATCH_SIZE}"
        )
    return args


def main() -> None:
    exit_on_sigterm()
    args = parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        if args.base_model:
            judge = f"scalar judge from {Path(args.base_model).name}"
            server_args = ["--model", str(build_scalar_judge(args.base_model, Path(workdir) / "judge"))]
        else:
            judge, server_args = "rule judge", ["--judge", "rule"]
        server_args += ["--batch-timeout", "0", "--max-batch-requests", str(args.max_batch_requests)]
        with start_server([*server_args, "--log-level", "warning"], log_path=Path(workdir) / "server.log") as server:
            results = measure(server.url, args)
    keys = ("repetitions", "rewards", "sequential", "callers", "verl_batch", "max_batch_requests", "concurrent_chunks")
    config = {"judge": judge, **{key: getattr(args, key) for key in keys}, "batch_timeouts": args.batch_timeouts}
    name = args.name or ("adapter_scalar" if args.base_model else "adapter_rule")
    paths = write_results(name, {"config": config, "results": results}, report(results, config), args.results_dir)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
