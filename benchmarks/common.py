"""What every benchmark shares: the machine it ran on, repeated interleaved runs and their statistics, the result
files."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO_ROOT = RESULTS_DIR.parents[1]


def exit_on_sigterm() -> None:
    """SIGTERM (a `timeout`, a scheduler's stop) ends the run as Ctrl-C does, through its `with` and `finally`
    blocks: the judge servers it started, each in a session of its own that no signal to this process reaches,
    are stopped and its other children killed, instead of outliving it."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def machine() -> dict:
    """Where the numbers come from: CPU model and count, memory, library versions, commit."""
    cpu_model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_kb = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    import torch
    import transformers

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    return {
        "cpu": cpu_model,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kb / 2**20, 1),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "commit": commit,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def server_default_dtype() -> str:
    """The dtype the server's --dtype auto picks on this machine (float32 on a CPU, bfloat16 on a GPU)."""
    from judge_models.transformers_engine import resolve_device, resolve_dtype

    return str(resolve_dtype("auto", resolve_device("auto"))).removeprefix("torch.")


def chosen_sizes(args, defaults: dict, smoke: dict) -> dict:
    """The run sizes: each option given on the command line (an argparse attribute of the same name, None when
    not given), else the smoke or the full default."""
    base = smoke if args.smoke else defaults
    return {key: default if getattr(args, key) is None else getattr(args, key) for key, default in base.items()}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation."""
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


class RunLog:
    """Stamps each run, as it starts, with its repetition, its place among all runs (`order`), its start in seconds
    since the first run and the 1-minute load average just before it: what shows that runs were interleaved and
    what else the machine was doing."""

    def __init__(self):
        self._first_start: float | None = None
        self._runs = 0

    def start(self, repetition: int) -> dict:
        now = time.monotonic()
        if self._first_start is None:
            self._first_start = now
        stamp = {
            "repetition": repetition,
            "order": self._runs,
            "started_s": round(now - self._first_start, 3),
            "load_average_1min": round(os.getloadavg()[0], 2),
        }
        self._runs += 1
        return stamp


def rotated(names: Sequence[str], repetition: int) -> list[str]:
    """The methods' order in a repetition: A B C, then B C A, ...: drift over the run weighs on each method alike."""
    shift = repetition % len(names)
    return [*names[shift:], *names[:shift]]


def spread(values: Sequence[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize_runs(runs: list[dict], keys: Sequence[str]) -> dict:
    """A method's runs, and the median and range of each of `keys` over them."""
    return {"runs": runs, **{key: spread([run[key] for run in runs]) for key in keys}}


def add_ratios(results: dict[str, dict], key: str, baseline: str, label: str | None = None) -> None:
    """Each method's median `key` over the baseline's, as `<key>_vs_<label>` (label: the baseline's name)."""
    reference = results[baseline][key]["median"]
    for result in results.values():
        result[f"{key}_vs_{label or baseline}"] = round(result[key]["median"] / reference, 3)


def median_and_range(summary: dict, digits: int = 1) -> str:
    """`median (min-max)` of a spread, for a table cell."""
    return f"{summary['median']:.{digits}f} ({summary['min']:.{digits}f}-{summary['max']:.{digits}f})"


def load_averages(runs: list[dict]) -> str:
    """A sentence giving, per repetition, the range of the 1-minute load averages before its runs."""
    by_repetition: dict[int, list[float]] = {}
    for run in runs:
        by_repetition.setdefault(run["repetition"], []).append(run["load_average_1min"])
    ranges = [f"{rep + 1}: {min(loads):.2f}-{max(loads):.2f}" for rep, loads in sorted(by_repetition.items())]
    return "1-minute load average before the runs of each repetition (min-max): " + ", ".join(ranges) + "."


def command_line() -> str:
    """The command that is running, as a user would type it (`python -m benchmarks.<name> ...`)."""
    main_spec = getattr(sys.modules["__main__"], "__spec__", None)
    program = f"python -m {main_spec.name}" if main_spec else f"python {sys.argv[0]}"
    return " ".join([program, shlex.join(sys.argv[1:])]).rstrip()


def write_results(name: str, results: dict, markdown: str, out_dir: Path = RESULTS_DIR) -> tuple[Path, Path]:
    """`<name>.json` (everything) and `<name>.md` (the table, the machine and the command). Paths inside the
    repository are written relative to it: results name no checkout's location."""
    out_dir.mkdir(parents=True, exist_ok=True)
    info = machine()
    payload = {"benchmark": name, "command": command_line(), "machine": info, **results}
    json_path = out_dir / f"{name}.json"
    json_path.write_text(repo_relative(json.dumps(payload, indent=2) + "\n"))
    footer = (
        f"\nMachine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB, {info.get('gpu') or 'no GPU'}; "
        f"torch {info['torch']}, transformers {info['transformers']}; commit {info['commit']}, {info['date']}.\n"
        f"Command: `{payload['command']}`\n"
    )
    md_path = out_dir / f"{name}.md"
    md_path.write_text(repo_relative(markdown.rstrip() + "\n" + footer))
    return json_path, md_path


def repo_relative(text: str) -> str:
    """`text` with every absolute path inside the repository made relative to it (the commands run there)."""
    inside = re.compile(re.escape(str(REPO_ROOT)) + r"(?:/|(?![\w.-]))")
    return inside.sub(lambda match: "" if match.group().endswith("/") else ".", text)


def markdown_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def add_scalar_judge_options(parser: argparse.ArgumentParser) -> None:
    """--judge DIR or --base-model DIR, one of them required: the scalar judge a benchmark serves."""
    judge = parser.add_mutually_exclusive_group(required=True)
    judge.add_argument("--judge", type=Path, help="the scalar judge's directory (e.g. make demo's runs/demo/bt/hf)")
    judge.add_argument("--base-model", type=Path, help="an HF causal LM: the judge is built from it with a fresh head")


def scalar_judge_dir(args: argparse.Namespace, workdir: Path) -> Path:
    """--judge, or a Bradley-Terry judge built in `workdir` from --base-model with a fresh head."""
    if args.judge is not None:
        return args.judge
    from tests.support.models import build_scalar_judge

    return build_scalar_judge(args.base_model, workdir / "judge")


def scalar_judge_name(args: argparse.Namespace) -> str:
    """The judge as the results name it."""
    return str(args.judge or f"{args.base_model} with a fresh head")
