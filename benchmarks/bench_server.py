"""Benchmark 1: judge server throughput and latency with dynamic batching vs one request at a time.

    python -m benchmarks.bench_server --base-model runs/demo/models/smollm2 --name server_smollm2   # ~8 min
    python -m benchmarks.bench_server --base-model runs/demo/models/tiny --name server_tiny         # ~1-2 min
    python -m benchmarks.bench_server --base-model DIR --smoke --results-dir /tmp/results           # a quick check

A scalar judge (the base model with a fresh one-label head: the BT export format; its weights do not
change the cost) is served by `python -m serving` three times, all three started once, side by side: with
--no-batching (one judgement per model call, the way peers serve rewards), with the default dynamic
batching (max_batch_size 16, batch_timeout 0.05 s: a batch waits up to 50 ms for more judgements after its
first one arrived), and with --batch-timeout 0 (no waiting: a batch is whatever queued while the model was
busy). Only one of them is being measured at a time; the others sit idle.

At each concurrency level, that many clients keep one POST /judge each in flight until the same fixed set of
requests is answered: --requests of them (16 by default), or as many as the level has clients if that is
more (128 at level 128). The whole comparison runs --repetitions times (5); in each repetition every level
measures the three servers one after another, their order rotated from one repetition to the next (A B C,
B C A, C A B, ...) so that drift weighs on each alike. The results give req/s and latency as median and
range over the repetitions, ratios of medians against no batching, and the 1-minute load average before
every run. The request counts are small so that a SmolLM2-135M run stays within about 8 minutes on a 2-core
CPU (5 x 3 x 192 requests at ~7 req/s); raise --requests on a faster machine. The client runs on the same
machine as the servers and takes some of its CPU, in every mode alike.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import (
    RESULTS_DIR,
    RunLog,
    add_ratios,
    chosen_sizes,
    exit_on_sigterm,
    load_averages,
    markdown_table,
    median_and_range,
    percentile,
    rotated,
    summarize_runs,
    write_results,
)
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
DEFAULTS = {"repetitions": 5, "requests": 16, "concurrency": [1, 8, 32, 128]}
SMOKE = {"repetitions": 2, "requests": 8, "concurrency": [1, 4]}
SUMMARY_KEYS = ("requests_per_s", "p50_ms", "p99_ms", "mean_batch_size")


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


def server_metric(url: str, name: str, **labels: str) -> float:
    """The sum of the server's /metrics samples called `name` whose labels include `labels`."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    samples = [
        sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    ]
    if not samples:
        raise RuntimeError(f"the server's /metrics has no {name} {labels or ''}")
    return sum(sample.value for sample in samples)


def level_run(url: str, bodies: list[dict], concurrency: int) -> dict:
    calls_before = server_metric(url, "judge_batch_size_count")
    latencies, wall = asyncio.run(closed_loop(url, bodies, concurrency))
    calls = int(server_metric(url, "judge_batch_size_count") - calls_before)
    return {
        "wall_s": round(wall, 4),
        "requests_per_s": round(len(bodies) / wall, 2),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "model_calls": calls,
        "mean_batch_size": round(len(bodies) / calls, 2),
    }


@contextmanager
def running_servers(judge_dir: Path, log_dir: Path) -> Iterator[dict[str, str]]:
    """The judge served in every mode at once: each mode's URL."""
    with ExitStack() as stack:
        urls = {}
        for index, (mode, flags) in enumerate(MODES.items()):
            command = ["--model", str(judge_dir), "--log-level", "warning", *flags]
            urls[mode] = stack.enter_context(start_server(command, log_path=log_dir / f"server_{index}.log")).url
        yield urls


def requests_at(concurrency: int, requests: int) -> int:
    """Requests answered at a level: at least one per client."""
    return max(requests, concurrency)


def measure(urls: dict[str, str], bodies: list[dict], levels: list[int], requests: int, repetitions: int) -> list[dict]:
    """Every level's runs, each repetition measuring the modes in turn (rotated), and their summaries."""
    runs: dict[int, dict[str, list[dict]]] = {level: {mode: [] for mode in MODES} for level in levels}
    log = RunLog()
    for repetition in range(repetitions):
        for concurrency in levels:
            level_bodies = bodies[: requests_at(concurrency, requests)]
            for mode in rotated(list(MODES), repetition):
                stamp = log.start(repetition)
                runs[concurrency][mode].append({**stamp, **level_run(urls[mode], level_bodies, concurrency)})
                print(concurrency, mode, runs[concurrency][mode][-1], flush=True)
    results = []
    for concurrency, level_runs in runs.items():
        modes = {mode: summarize_runs(mode_runs, SUMMARY_KEYS) for mode, mode_runs in level_runs.items()}
        add_ratios(modes, "requests_per_s", BASELINE, "no_batching")
        results.append({"concurrency": concurrency, "requests": requests_at(concurrency, requests), "modes": modes})
    return results


def report(results: list[dict], config: dict) -> str:
    rows = [
        [
            level["concurrency"],
            mode,
            median_and_range(result["requests_per_s"]),
            f"{result['requests_per_s_vs_no_batching']:.2f}x",
            f"{result['p50_ms']['median']:.0f}",
            f"{result['p99_ms']['median']:.0f}",
            f"{result['mean_batch_size']['median']:.1f}",
        ]
        for level in results
        for mode, result in level["modes"].items()
    ]
    headers = [
        "concurrency",
        "server",
        "req/s: median (min-max)",
        "vs no batching (medians)",
        "p50 ms: median",
        "p99 ms: median",
        "mean batch: median",
    ]
    runs = [run for level in results for result in level["modes"].values() for run in result["runs"]]
    return (
        "## Judge server: dynamic batching vs one request at a time\n\n"
        f"{Path(config['base_model']).name} scalar judge; {config['repetitions']} repetitions, the servers "
        f"interleaved at every level; requests per level: {config['requests_per_level']}.\n\n"
        + markdown_table(headers, rows)
        + f"\n\n{load_averages(runs)}\n"
    )


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-model", required=True, help="HF causal LM directory the scalar judge is built from")
    parser.add_argument("--smoke", action="store_true", help=f"small sizes for a quick check: {SMOKE}")
    parser.add_argument(
        "--repetitions", type=int, help=f"runs of every mode at every level (default {DEFAULTS['repetitions']})"
    )
    parser.add_argument(
        "--requests", type=int, help=f"requests per level, at least one per client (default {DEFAULTS['requests']})"
    )
    parser.add_argument(
        "--concurrency", type=int, nargs="+", help=f"clients in flight (default {DEFAULTS['concurrency']})"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the request texts")
    parser.add_argument("--name", default="server", help="name of the result files")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the result files go")
    args = parser.parse_args()
    size = chosen_sizes(args, DEFAULTS, SMOKE)
    if size["repetitions"] < 1 or size["requests"] < 1 or min(size["concurrency"]) < 1:
        raise SystemExit("--repetitions, --requests and --concurrency must be positive")

    bodies = request_bodies(max(requests_at(level, size["requests"]) for level in size["concurrency"]), args.seed)
    warmup = request_bodies(8, args.seed + 1)
    with tempfile.TemporaryDirectory() as workdir:
        judge_dir = build_scalar_judge(args.base_model, Path(workdir) / "judge")
        with running_servers(judge_dir, Path(workdir)) as urls:
            for url in urls.values():
                asyncio.run(closed_loop(url, warmup, 4))
            results = measure(urls, bodies, size["concurrency"], size["requests"], size["repetitions"])
    config = {
        "base_model": args.base_model,
        "repetitions": size["repetitions"],
        "requests_per_level": {level: requests_at(level, size["requests"]) for level in size["concurrency"]},
        "seed": args.seed,
        "modes": MODES,
    }
    paths = write_results(args.name, {"config": config, "results": results}, report(results, config), args.results_dir)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
