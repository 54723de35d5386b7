"""What every benchmark shares: the machine it ran on, latency statistics and the result files."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


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
        "gpu": None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "commit": commit,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation."""
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def command_line() -> str:
    """The command that is running, as a user would type it (`python -m benchmarks.<name> ...`)."""
    main_spec = getattr(sys.modules["__main__"], "__spec__", None)
    program = f"python -m {main_spec.name}" if main_spec else f"python {sys.argv[0]}"
    return " ".join([program, *sys.argv[1:]])


def write_results(name: str, results: dict, markdown: str, out_dir: Path = RESULTS_DIR) -> tuple[Path, Path]:
    """`<name>.json` (everything) and `<name>.md` (the table, the machine and the command)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    info = machine()
    payload = {"benchmark": name, "command": command_line(), "machine": info, **results}
    json_path = out_dir / f"{name}.json"
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    footer = (
        f"\nMachine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB, no GPU; "
        f"torch {info['torch']}, transformers {info['transformers']}; commit {info['commit']}, {info['date']}.\n"
        f"Command: `{payload['command']}`\n"
    )
    md_path = out_dir / f"{name}.md"
    md_path.write_text(markdown.rstrip() + "\n" + footer)
    return json_path, md_path


def markdown_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
