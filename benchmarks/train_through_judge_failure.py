"""Reliability figure: policy GRPO with the judge as its reward trains through a judge server failure.

    python -m benchmarks.train_through_judge_failure                   # 20 steps (~5 min on 2 busy cores)
    python -m benchmarks.train_through_judge_failure --steps 3 --name train_through_failure_smoke

cookbooks/rl_with_judge_reward/run_policy_grpo.sh runs as a user runs it (bash, CPU mode, configs/cpu_tiny.yaml:
the tiny random policy, 4 prompts x 4 answers a step, on a private local Ray) on offline policy data; the judge
is a real server process (an untrained tiny scalar judge, or --judge rule). Once verl has written the rollout
dump of step `--kill-after-step`, the judge gets kill -9; `--down-for` seconds later a new judge process
starts at the same URL (its start-up is part of the outage). The adapter's settings are the launcher's
defaults but for `--breaker-timeout` (how long the circuit, once open, fails requests fast before a probe),
so that the steps after the restart show the rewards coming from the judge again within the run.

Figures: the launcher's exit code (0: training finished); per step, when its dump appeared and the answers by
reward source, read from verl's rollout dump (trainer.rollout_data_dir: one JSON line per answer with the
`source`, `from_rule_fallback` and `from_cache` that judge_rewards.verl_reward returns per sample; verl logs
no per-key metrics for training steps) and from the validation dump; answers whose tag is missing or
inconsistent (must be 0); the validation `from_rule_fallback` mean verl logs; the last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks.common import exit_on_sigterm, markdown_table, write_results
from benchmarks.reliability import RestartableJudge, judge_server_args, load_average, tiny_model, tiny_scalar_judge
from data_prep import offline
from tests.grpo_recipe import POLICY_LAUNCHER, launcher_env, processes_mentioning
from tests.launcher_helpers import logged_metrics
from tests.support.processes import kill_group

SOURCES = ("judge", "cache", "rule_fallback")
CPU_CONFIG = POLICY_LAUNCHER.parent / "configs" / "cpu_tiny.yaml"
PROMPTS_PER_STEP = 4  # configs/cpu_tiny.yaml's data.train_batch_size
POLL_S = 0.5
ADAPTER_WARNINGS = {
    "fallback": "rewards come from rules (source=rule_fallback)",
    "failed_batch": "judge batch of",
    "circuit_open": "Circuit breaker open",
}


def tag_problem(answer: dict) -> str | None:
    """Why an answer's reward tag is missing or inconsistent; None when it is sound."""
    source = answer.get("source")
    if source not in SOURCES:
        return f"source {source!r}"
    flags = {"from_rule_fallback": float(source == "rule_fallback"), "from_cache": float(source == "cache")}
    for key, expected in flags.items():
        if answer.get(key) != expected:
            return f"{key} {answer.get(key)!r} with source {source!r}"
    score = answer.get("score")
    if not isinstance(score, (int, float)) or not math.isfinite(score):
        return f"score {score!r}"
    return None


def dump_sources(directory: Path) -> dict:
    """Per dump file (`<step>.jsonl`, one JSON line per answer): answers by reward source and untagged ones."""
    steps, problems = {}, []
    for path in sorted(directory.glob("*.jsonl"), key=lambda p: int(p.stem)):
        counts = Counter({source: 0 for source in SOURCES})
        for line_number, line in enumerate(path.read_text().splitlines(), 1):
            answer = json.loads(line)
            problem = tag_problem(answer)
            if problem is None:
                counts[answer["source"]] += 1
            else:
                counts["untagged"] += 1
                problems.append(f"{path.name}:{line_number}: {problem}")
        steps[int(path.stem)] = {**counts, "untagged": counts["untagged"]}
    total = Counter()
    for counts in steps.values():
        total.update(counts)
    return {"by_step": steps, "total": {key: total[key] for key in (*SOURCES, "untagged")}, "problems": problems[:10]}


def dumped_steps(directory: Path) -> int:
    """The highest step whose rollout dump verl has written (0: none yet)."""
    return max((int(path.stem) for path in directory.glob("*.jsonl")), default=0)


def policy_data(workdir: Path, steps: int) -> dict[str, Path]:
    out = workdir / "data"
    offline.generate(
        out, offline.OfflineConfig(train_size=max(24, 6 * PROMPTS_PER_STEP * steps), val_size=8, eval_size=5)
    )
    return {"TRAIN_FILE": out / "policy" / "train.parquet", "VAL_FILE": out / "policy" / "val.parquet"}


def run_with_failure(judge: RestartableJudge, command: list[str], env: dict, dirs: dict[str, Path], args) -> dict:
    """Runs the launcher, killing the judge once the rollout dump of `kill_after_step` is there and starting a
    new judge process `down_for` seconds later; what happened, in seconds since the launcher started."""
    started, started_wall = time.monotonic(), time.time()
    events, killed_at = [], None
    with open(dirs["log"], "w") as log:
        process = subprocess.Popen(
            command, cwd=POLICY_LAUNCHER.parent, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            while process.poll() is None and time.monotonic() - started < args.timeout:
                if killed_at is None and dumped_steps(dirs["rollouts"]) >= args.kill_after_step:
                    judge.kill()
                    killed_at = time.monotonic()
                    events.append({"event": "judge killed (kill -9)", "at_s": round(killed_at - started)})
                elif killed_at is not None and len(events) == 1 and time.monotonic() - killed_at >= args.down_for:
                    startup_s = judge.start()
                    events.append(
                        {
                            "event": "new judge process serving",
                            "at_s": round(time.monotonic() - started),
                            "startup_s": round(startup_s, 1),
                        }
                    )
                time.sleep(POLL_S)
            timed_out = process.poll() is None
        finally:
            kill_group(process.pid)
            process.wait()
    dumped_at = {int(p.stem): round(p.stat().st_mtime - started_wall) for p in dirs["rollouts"].glob("*.jsonl")}
    return {
        "exit_code": None if timed_out else process.returncode,
        "timed_out": timed_out,
        "wall_s": round(time.monotonic() - started),
        "events": events,
        "step_dumped_at_s": dict(sorted(dumped_at.items())),
    }


def step_metrics(log_text: str) -> dict:
    """verl's logged metrics that say where the rewards came from and what they were, per step."""
    data_source = offline.DATA_SOURCE_POLICY
    keys = (
        "critic/score/mean",
        "timing_s/reward",
        "timing_s/step",
        f"val-aux/{data_source}/from_rule_fallback/mean@1",
        f"val-aux/{data_source}/from_cache/mean@1",
    )
    return {
        step: {key: values[key] for key in keys if key in values} for step, values in logged_metrics(log_text).items()
    }


def report(results: dict) -> str:
    run, training, validation = results["run"], results["training"], results["validation"]
    metrics, dumped_at = results["step_metrics"], run["step_dumped_at_s"]
    rows = [
        [
            step,
            dumped_at.get(step, "-"),
            *(counts[source] for source in SOURCES),
            counts["untagged"],
            _rounded(metrics.get(step, {}).get("critic/score/mean")),
            _rounded(metrics.get(step, {}).get("timing_s/reward")),
        ]
        for step, counts in training["by_step"].items()
    ]
    rows += [
        [f"validation (after step {step})", "-", *(counts[source] for source in SOURCES), counts["untagged"], "-", "-"]
        for step, counts in validation["by_step"].items()
    ]
    events = "; ".join(f"{e['event']} at {e['at_s']} s" for e in run["events"])
    load = results["load_average"]
    return "\n\n".join(
        [
            f"## Policy GRPO through a judge failure ({results['config']['judge']} judge, "
            f"{results['config']['steps']} steps, CPU)",
            f"Exit code {run['exit_code']} after {run['wall_s']} s (timed out: {run['timed_out']}); "
            f"{events or 'no fault'}; last checkpoint: step {results['checkpoint_step']}; "
            f"Ray processes left: {results['ray_processes_left']}. Times are seconds since the launcher started.",
            markdown_table(
                ["step", "dumped at s", *SOURCES, "untagged", "critic/score/mean", "timing_s/reward"],
                rows,
            ),
            f"Answers by source in all: {training['total']} (training), {validation['total']} (validation). "
            f"Adapter warnings in the log: {results['adapter_warnings']}.",
            f"Load average (1, 5, 15 min) before: {load['before']}, after: {load['after']}.",
        ]
    )


def _rounded(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps")
    parser.add_argument("--kill-after-step", type=int, default=1, help="kill -9 the judge once this step's dump exists")
    parser.add_argument("--down-for", type=float, default=5, help="seconds before a new judge process starts")
    parser.add_argument(
        "--breaker-timeout",
        type=float,
        default=10,
        help="the adapter's circuit_breaker_timeout (launcher default 30 s: on this CPU that is 6-10 steps of rule "
        "rewards after the judge is back)",
    )
    parser.add_argument("--judge", choices=["scalar", "rule"], default="scalar", help="scalar: the tiny scalar judge")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds before the run is stopped")
    parser.add_argument("--workdir", help="keep models, data, dumps and logs here (default: a temporary directory)")
    parser.add_argument("--name", default="train_through_failure", help="result file name")
    parser.add_argument("overrides", nargs="*", help="key=value settings passed on to the launcher")
    args = parser.parse_args()
    if not 1 <= args.kill_after_step < args.steps:
        parser.error("--kill-after-step must be at least 1 and less than --steps: the failure must happen mid-run")

    before = load_average()
    with tempfile.TemporaryDirectory(prefix="rayp", dir="/tmp") as scratch:
        workdir = Path(args.workdir or scratch)
        results = train_through_failure(args, workdir, ray_tmpdir=Path(scratch) / "ray")
    results["load_average"] = {"before": before, "after": load_average()}
    paths = write_results(args.name, results, report(results))
    print(f"wrote {paths[0]} and {paths[1]}")


def train_through_failure(args, workdir: Path, ray_tmpdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    ray_tmpdir.mkdir(parents=True, exist_ok=True)
    dirs = {name: workdir / name for name in ("save", "rollouts", "validation")}
    dirs["log"] = workdir / "launcher.log"
    policy = tiny_model(workdir)
    judge_model = tiny_scalar_judge(policy, workdir) if args.judge == "scalar" else None
    env = launcher_env(
        **policy_data(workdir, args.steps),
        MODEL_PATH=policy,
        RAY_MODE="local",
        RAY_TMPDIR=ray_tmpdir,
        SAVE_DIR=dirs["save"],
        ROLLOUT_DATA_DIR=dirs["rollouts"],
    )
    server_args = [*judge_server_args(judge_model), "--log-level", "warning"]
    with RestartableJudge(server_args, workdir / "judge_server.log") as judge:
        env["JUDGE_MODEL_URL"] = judge.url
        command = [
            "bash",
            str(POLICY_LAUNCHER),
            "--config",
            str(CPU_CONFIG),
            f"trainer.total_training_steps={args.steps}",
            f"trainer.validation_data_dir={dirs['validation']}",
            f"+custom_reward_function.reward_kwargs.circuit_breaker_timeout={args.breaker_timeout}",
            *args.overrides,
        ]
        run = run_with_failure(judge, command, env, dirs, args)
    log_text = dirs["log"].read_text(errors="replace")
    checkpoint = dirs["save"] / "latest_checkpointed_iteration.txt"
    return {
        "config": {key: value for key, value in vars(args).items() if key != "name"}
        | {"launcher_command": command[1:]},
        "run": run,
        "training": dump_sources(dirs["rollouts"]),
        "validation": dump_sources(dirs["validation"]),
        "step_metrics": step_metrics(log_text),
        "adapter_warnings": {name: log_text.count(text) for name, text in ADAPTER_WARNINGS.items()},
        "checkpoint_step": int(checkpoint.read_text()) if checkpoint.exists() else None,
        "ray_processes_left": len(processes_mentioning(str(ray_tmpdir))),
        "log_tail": log_text[-3000:] if run["exit_code"] != 0 else "",
    }


if __name__ == "__main__":
    main()
