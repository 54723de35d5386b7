"""Reliability figure: the reward adapter (JudgeRewardSystem) under load while its judge server is killed
and brought back, again and again.

    python -m benchmarks.soak_adapter                                   # 120 s, rule judge (~2.5 min)
    python -m benchmarks.soak_adapter --judge scalar                    # the tiny scalar judge
    python -m benchmarks.soak_adapter --duration 20 --kill-every 6 --name soak_smoke

`--callers` threads ask for one reward after another for `--duration` seconds (with a `--pause` between
calls, as a trainer does work between rewards). Half the items (`--repeat-fraction`) come again from a
pool, so the adapter's cache answers them once the judge has; the others are new. After each
`--kill-every` seconds of service the judge server gets SIGKILL (it answers nothing it holds), and
`--down-for` seconds later a new process starts at the same URL.

Figures: rewards asked, answered by judge / cache / rule_fallback; lost: a call that raised or returned no
reward dict (must be 0); hung: a call that took longer than the adapter's result_timeout plus a margin, or
had not returned `--hang-margin` seconds after the run's end (must be 0); p50/p99 latency; the resident
memory of client and server sampled every second, its peak and whether it grows (mean of the last third of
the samples over the first third); the client's open file descriptors and threads, first and last.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import psutil

from benchmarks.common import exit_on_sigterm, markdown_table, write_results
from benchmarks.reliability import (
    RestartableJudge,
    judge_server_args,
    load_average,
    tiny_model,
    tiny_scalar_judge,
    tree_rss_bytes,
)
from judge_rewards import JudgeRewardSystem
from judge_rewards.judge_client import BatchingJudgeClient
from judge_rewards.reward_config import JudgeRewardConfig
from judge_rewards.reward_metrics import RewardMetrics

SOURCES = ("judge", "cache", "rule_fallback")
MIB = 2**20
LOST_EXAMPLES_KEPT = 5
HISTOGRAM_GROWTH = 1.02  # latency bucket width: percentiles to within 2%


class LatencyHistogram:
    """Latencies in log-spaced buckets: constant memory however many calls a long soak makes (a list of
    millions of floats would itself show up as client memory growth)."""

    def __init__(self):
        self.buckets: Counter = Counter()
        self.count = 0
        self.max = 0.0

    def add(self, seconds: float) -> None:
        self.buckets[math.floor(math.log(max(seconds, 1e-7), HISTOGRAM_GROWTH))] += 1
        self.count += 1
        self.max = max(self.max, seconds)

    def percentile(self, q: float) -> float:
        """The upper edge of the bucket holding the q-th percentile (0-100)."""
        rank, seen = q / 100 * self.count, 0
        for bucket in sorted(self.buckets):
            seen += self.buckets[bucket]
            if seen >= rank:
                return min(HISTOGRAM_GROWTH ** (bucket + 1), self.max)
        return float("nan")

    def summary(self) -> dict:
        if not self.count:
            return {"count": 0}
        return {
            "count": self.count,
            "p50_ms": round(self.percentile(50) * 1000, 2),
            "p99_ms": round(self.percentile(99) * 1000, 2),
            "max_ms": round(self.max * 1000, 2),
        }


class CallRecord:
    """What the callers saw, under one lock: answers by source, latencies, lost and late calls, and the
    answers per second of the run by source."""

    def __init__(self, hang_after_s: float, started: float):
        self.hang_after_s = hang_after_s
        self.started = started
        self.lock = threading.Lock()
        self.by_source: Counter = Counter()
        self.latency = LatencyHistogram()
        self.latency_by_source = defaultdict(LatencyHistogram)
        self.timeline = defaultdict(Counter)
        self.lost = 0
        self.lost_examples: list[str] = []
        self.late = 0
        self.in_flight: dict[int, float] = {}

    def begin(self, caller: int) -> float:
        now = time.monotonic()
        with self.lock:
            self.in_flight[caller] = now
        return now

    def end(self, caller: int, began: float, result) -> None:
        now = time.monotonic()
        elapsed = now - began
        source = result.get("source") if isinstance(result, dict) else None
        with self.lock:
            del self.in_flight[caller]
            self.latency.add(elapsed)
            self.late += elapsed > self.hang_after_s
            if source in SOURCES and isinstance(result.get("reward"), (int, float)):
                self.by_source[source] += 1
                self.latency_by_source[source].add(elapsed)
                self.timeline[int(now - self.started)][source] += 1
            else:
                self.lost += 1
                if len(self.lost_examples) < LOST_EXAMPLES_KEPT:
                    self.lost_examples.append(repr(result)[:300])

    def summary(self) -> dict:
        with self.lock:
            return {
                "calls": self.latency.count,
                "by_source": {source: self.by_source[source] for source in SOURCES},
                "lost": self.lost,
                "lost_examples": self.lost_examples,
                "returned_late": self.late,
                "not_returned": len(self.in_flight),
                "hung": self.late + len(self.in_flight),
                "hang_after_s": round(self.hang_after_s, 2),
                "latency": self.latency.summary(),
                "latency_by_source": {source: self.latency_by_source[source].summary() for source in SOURCES},
                "per_second": [
                    {"t_s": second, **{source: self.timeline[second][source] for source in SOURCES}}
                    for second in sorted(self.timeline)
                ],
            }


def drive_callers(
    reward_one: Callable[[int, int], dict], callers: int, duration_s: float, hang_after_s: float, pause_s: float = 0.0
) -> dict:
    """`callers` threads call `reward_one(caller, call_number)` until `duration_s` has passed; the run then
    waits up to `hang_after_s` for calls still in flight, and those that never return count as hung."""
    record = CallRecord(hang_after_s, time.monotonic())
    deadline = record.started + duration_s

    def caller(index: int) -> None:
        number = 0
        while time.monotonic() < deadline:
            began = record.begin(index)
            try:
                result = reward_one(index, number)
            except Exception as err:  # a lost call, whatever it raised
                result = err
            record.end(index, began, result)
            number += 1
            time.sleep(pause_s)

    threads = [threading.Thread(target=caller, args=(i,), daemon=True, name=f"soak-{i}") for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline + hang_after_s - time.monotonic()))
    return record.summary()


class Items:
    """Each caller's items: a `repeat_fraction` of them drawn from a shared pool, the rest never seen before.
    Every item carries a NUMBER reference answer, so the rule fallback can score it when the judge cannot."""

    def __init__(self, pool_size: int, repeat_fraction: float, seed: int):
        self.pool = [self._item(f"pool-{i}", random.Random(f"{seed}/pool/{i}")) for i in range(pool_size)]
        self.repeat_fraction = repeat_fraction
        self.seed = seed
        self._rngs: dict[int, random.Random] = {}

    def get(self, caller: int, number: int) -> dict:
        rng = self._rngs.setdefault(caller, random.Random(f"{self.seed}/caller/{caller}"))
        if rng.random() < self.repeat_fraction:
            return rng.choice(self.pool)
        return self._item(f"caller-{caller}-call-{number}", rng)

    @staticmethod
    def _item(name: str, rng: random.Random) -> dict:
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        said = a + b if rng.random() < 0.5 else a + b + 1
        return {
            "prompt": f"What is {a} + {b}? ({name})",
            "completion": f"Adding them gives {said}.",
            "answer": str(a + b),
            "answer_type": "NUMBER",
        }


def cycle_server(judge: RestartableJudge, stop: threading.Event, started: float, every_s: float, down_s: float):
    """Kill the judge every `every_s` seconds and start it again `down_s` later, until `stop`; the events."""
    events = []
    while not stop.wait(every_s):
        judge.kill()
        killed_at = time.monotonic() - started
        if stop.wait(down_s):
            events.append({"killed_at_s": round(killed_at, 1), "restarted_at_s": None})
            break
        startup_s = judge.start()
        events.append(
            {
                "killed_at_s": round(killed_at, 1),
                "restarted_at_s": round(time.monotonic() - started, 1),
                "startup_s": round(startup_s, 2),
            }
        )
    return events


def sample_memory(judge: RestartableJudge, stop: threading.Event, started: float, interval_s: float) -> list[dict]:
    me = psutil.Process()
    samples = []
    while not stop.wait(interval_s):
        pid = judge.pid
        samples.append(
            {
                "t_s": round(time.monotonic() - started, 1),
                "client_rss": me.memory_info().rss,
                "client_fds": me.num_fds(),
                "client_threads": me.num_threads(),
                "server_pid": pid,
                "server_rss": tree_rss_bytes(pid) if pid and judge.alive() else None,
            }
        )
    return samples


def growth(values: list[float]) -> dict:
    """Mean of the first and last third of a series and their ratio (None when too short to tell)."""
    third = len(values) // 3
    if third == 0:
        return {"first_third_mib": None, "last_third_mib": None, "last_over_first": None}
    first, last = statistics.mean(values[:third]), statistics.mean(values[-third:])
    return {
        "first_third_mib": round(first / MIB, 1),
        "last_third_mib": round(last / MIB, 1),
        "last_over_first": round(last / first, 3),
    }


def memory_summary(samples: list[dict], growth_threshold: float) -> dict:
    client = [s["client_rss"] for s in samples]
    server = [s["server_rss"] for s in samples if s["server_rss"] is not None]
    per_process = defaultdict(int)
    for s in samples:
        if s["server_rss"] is not None:
            per_process[s["server_pid"]] = max(per_process[s["server_pid"]], s["server_rss"])
    client_growth, server_growth = growth(client), growth(server)
    return {
        "samples": len(samples),
        "client": {
            "peak_mib": round(max(client, default=0) / MIB, 1),
            **client_growth,
            "grows": _grows(client_growth, growth_threshold),
            "fds_first_last": [samples[0]["client_fds"], samples[-1]["client_fds"]] if samples else None,
            "threads_first_last": [samples[0]["client_threads"], samples[-1]["client_threads"]] if samples else None,
        },
        "server": {
            "peak_mib": round(max(server, default=0) / MIB, 1),
            "peak_mib_per_process": [round(rss / MIB, 1) for rss in per_process.values()],
            **server_growth,
            "grows": _grows(server_growth, growth_threshold),
        },
        "series": samples,
    }


def _grows(series_growth: dict, threshold: float) -> bool | None:
    ratio = series_growth["last_over_first"]
    return None if ratio is None else ratio > 1 + threshold


def adapter_config(url: str, args) -> dict:
    return {
        "judge_url": url,
        "timeout": args.timeout,
        "max_retries": args.max_retries,
        "circuit_breaker_timeout": args.breaker_timeout,
    }


def soak(judge: RestartableJudge, args) -> dict:
    config = JudgeRewardConfig.from_mapping(adapter_config(judge.url, args))
    result_timeout = BatchingJudgeClient(config, RewardMetrics()).result_timeout
    items = Items(args.pool, args.repeat_fraction, args.seed)
    stop = threading.Event()
    started = time.monotonic()
    faults: list[dict] = []
    samples: list[dict] = []
    helpers = [
        threading.Thread(
            target=lambda: faults.extend(cycle_server(judge, stop, started, args.kill_every, args.down_for))
        ),
        threading.Thread(target=lambda: samples.extend(sample_memory(judge, stop, started, args.sample_every))),
    ]
    with JudgeRewardSystem(config) as adapter:
        for helper in helpers:
            helper.start()
        calls = drive_callers(
            lambda caller, number: adapter.reward(**items.get(caller, number)),
            args.callers,
            args.duration,
            result_timeout + args.hang_margin,
            args.pause,
        )
        stop.set()
        for helper in helpers:
            helper.join()
        adapter_metrics = adapter.get_metrics()
    return {
        "config": {
            **{key: value for key, value in vars(args).items() if key != "name"},
            "adapter": config.redacted(),
            "adapter_result_timeout_s": round(result_timeout, 2),
        },
        "calls": calls,
        "faults": {"kills": len(faults), "events": faults},
        "memory": memory_summary(samples, args.growth_threshold),
        "adapter_metrics": adapter_metrics,
    }


def report(results: dict) -> str:
    calls, memory, config = results["calls"], results["memory"], results["config"]
    latency = calls["latency"]
    rows = [
        ["rewards asked", calls["calls"]],
        *[[f"answered by {source}", calls["by_source"][source]] for source in SOURCES],
        ["lost (raised, or no reward dict)", calls["lost"]],
        [f"hung (over {calls['hang_after_s']} s, or never returned)", calls["hung"]],
        ["latency p50 / p99 / max ms", f"{latency.get('p50_ms')} / {latency.get('p99_ms')} / {latency.get('max_ms')}"],
        *[
            [f"latency p50 / p99 ms, {source}", f"{stats.get('p50_ms')} / {stats.get('p99_ms')}"]
            for source, stats in calls["latency_by_source"].items()
        ],
        [
            "judge server kills (kill -9) / restarts",
            f"{results['faults']['kills']} / "
            f"{sum(e['restarted_at_s'] is not None for e in results['faults']['events'])}",
        ],
    ]
    client, server = memory["client"], memory["server"]
    memory_rows = [
        [
            name,
            side["peak_mib"],
            side["first_third_mib"],
            side["last_third_mib"],
            side["last_over_first"],
            side["grows"],
        ]
        for name, side in (("client (this process)", client), ("judge server (all processes)", server))
    ]
    load = results["load_average"]
    return "\n\n".join(
        [
            f"## Soak: the reward adapter, {config['callers']} callers for {config['duration']} s, judge server "
            f"({config['judge']} judge) killed (kill -9) after each {config['kill_every']} s of service, a new process "
            f"{config['down_for']} s later",
            markdown_table(["figure", "value"], rows),
            "### Resident memory, sampled every second (MiB)",
            markdown_table(["process", "peak", "first third", "last third", "last / first", "grows"], memory_rows),
            f"Client open file descriptors first / last: {client['fds_first_last']}, threads first / last: "
            f"{client['threads_first_last']}. Server peak per process: {server['peak_mib_per_process']} MiB.",
            f"Load average (1, 5, 15 min) before: {load['before']}, after: {load['after']}.",
        ]
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judge", choices=["rule", "scalar"], default="rule", help="scalar: the tiny scalar judge")
    parser.add_argument("--duration", type=float, default=120, help="seconds the callers ask for rewards")
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--pause", type=float, default=0.005, help="seconds a caller waits between two calls")
    parser.add_argument("--kill-every", type=float, default=20, help="seconds the judge serves before each kill")
    parser.add_argument("--down-for", type=float, default=3, help="seconds the judge stays dead")
    parser.add_argument("--pool", type=int, default=512, help="items that repeat")
    parser.add_argument("--repeat-fraction", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=5.0, help="adapter: seconds one HTTP attempt may take")
    parser.add_argument("--max-retries", type=int, default=2, help="adapter: retries of a failed batch")
    parser.add_argument("--breaker-timeout", type=float, default=2.0, help="adapter: seconds the circuit stays open")
    parser.add_argument("--hang-margin", type=float, default=5.0, help="seconds past result_timeout that count as hung")
    parser.add_argument("--sample-every", type=float, default=1.0, help="seconds between memory samples")
    parser.add_argument("--growth-threshold", type=float, default=0.1, help="last/first third above 1+this: grows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="soak", help="result file name")
    return parser.parse_args(argv)


def main() -> None:
    exit_on_sigterm()
    args = parse_args()

    before = load_average()
    with tempfile.TemporaryDirectory() as workdir:
        judge_model = tiny_scalar_judge(tiny_model(Path(workdir)), Path(workdir)) if args.judge == "scalar" else None
        server_args = [*judge_server_args(judge_model), "--log-level", "warning"]
        with RestartableJudge(server_args, Path(workdir) / "server.log") as judge:
            results = soak(judge, args)
    results["load_average"] = {"before": before, "after": load_average()}
    paths = write_results(args.name, results, report(results))
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
