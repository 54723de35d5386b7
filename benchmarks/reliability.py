"""What the reliability harnesses (fuzz_api, soak_adapter, train_through_judge_failure) share: the machine's
load, the memory of a process tree, a judge server that can be killed and brought back at the same URL, the
tiny judge they serve, and a bounded property-based run that counts its outcomes instead of stopping at the
first failure."""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tests.support.models import build_scalar_judge
from tests.support.servers import RunningServer, free_port, start_server

VIOLATIONS_KEPT_PER_KIND = 3
EXCERPT_CHARS = 300


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages: how busy the machine was around a measurement."""
    return [round(value, 2) for value in os.getloadavg()]


def tree_rss_bytes(pid: int) -> int | None:
    """Resident memory of a process and its children; None once the process is gone."""
    try:
        process = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
    except psutil.NoSuchProcess:
        return None


def tiny_model(workdir: Path) -> Path:
    """The random-init tiny causal LM (data_prep base-model tiny), built in seconds."""
    from data_prep.base_models import build_tiny

    return build_tiny(workdir / "tiny")


def tiny_scalar_judge(base_model: Path, workdir: Path) -> Path:
    """An untrained scalar judge on `base_model` (its scores mean nothing; its cost is the point)."""
    return build_scalar_judge(base_model, workdir / "tiny_judge")


def judge_server_args(judge_model: Path | None) -> list[str]:
    """`python -m serving` arguments: the scalar judge in `judge_model`, else the rule judge."""
    return ["--model", str(judge_model)] if judge_model else ["--judge", "rule"]


class RestartableJudge:
    """A judge server process at one URL for its whole life: `kill()` is kill -9 of its process group (it
    answers nothing it holds), `start()` brings a fresh process up at the same port."""

    def __init__(self, server_args: Sequence[str], log_path: Path):
        self.server_args = list(server_args)
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server: RunningServer | None = None

    def start(self) -> float:
        """Seconds until the new process answered /health."""
        started = time.monotonic()
        self.server = start_server(self.server_args, log_path=self.log_path, port=self.port)
        return time.monotonic() - started

    def kill(self) -> None:
        if self.server is not None:
            self.server.kill()

    @property
    def pid(self) -> int | None:
        return self.server.process.pid if self.server is not None else None

    def alive(self) -> bool:
        return self.server is not None and self.server.process.poll() is None

    def __enter__(self) -> RestartableJudge:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.server is not None:
            self.server.stop()


def excerpt(value) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + f"... ({len(text)} chars)"


@dataclass
class Outcome:
    """What one generated input did: its kind (a row of the report), its result (a column) and the properties
    it broke (an input that broke any counts once as a violation)."""

    kind: str
    result: str
    violations: list[str] = field(default_factory=list)


@dataclass
class Tally:
    tried: int = 0
    counts: dict = field(default_factory=lambda: defaultdict(Counter))
    violation_count: Counter = field(default_factory=Counter)
    violations: list[dict] = field(default_factory=list)

    def add(self, value, outcome: Outcome) -> None:
        self.tried += 1
        self.counts[outcome.kind][outcome.result] += 1
        if outcome.violations:
            self.violation_count[outcome.kind] += 1
            if self.violation_count[outcome.kind] <= VIOLATIONS_KEPT_PER_KIND:
                problem = excerpt("; ".join(outcome.violations))
                self.violations.append({"kind": outcome.kind, "input": excerpt(value), "problem": problem})

    def as_dict(self) -> dict:
        results = Counter()
        for by_result in self.counts.values():
            results.update(by_result)
        return {
            "inputs_tried": self.tried,
            "by_result": dict(sorted(results.items())),
            "by_kind": {kind: dict(sorted(by_result.items())) for kind, by_result in sorted(self.counts.items())},
            "violations": sum(self.violation_count.values()),
            "violations_by_kind": dict(self.violation_count),
            "violation_examples": self.violations,
        }


def run_property(strategy: st.SearchStrategy, check: Callable[[object], Outcome], examples: int, seed: int) -> dict:
    """`check` on `examples` inputs that hypothesis draws from `strategy` (seeded, no shrinking, no example
    database): every outcome is counted, and a broken property is recorded rather than ending the run."""
    tally = Tally()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def each_input(value):
        tally.add(value, check(value))

    hypothesis_seed(seed)(each_input)()
    return tally.as_dict()
