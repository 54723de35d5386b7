"""`python -m evaluation`: score a judge on a RewardBench 2-schema parquet file, through a
running judge server (--judge-url) or in this process from a model directory (--model)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from serving.config import JudgeConfig, add_arguments, from_arguments

from .data import DataError, file_digest, load_rows
from .judges import EvaluationError, HttpJudge, HttpJudgeOptions, InProcessJudge, JudgeBackend
from .report import write_outputs
from .run import SCORE_FIELDS, EvaluationOptions, evaluate

API_KEY_ENV = "JUDGE_MODEL_API_KEY"  # the reward adapter's variable: one key for every client


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m evaluation", description=__doc__)
    parser.add_argument(
        "--data", type=Path, required=True, help="parquet file in RewardBench 2's schema, e.g. OUT/eval/test.parquet"
    )
    parser.add_argument("--out", type=Path, required=True, help="directory for results.json, report.md and chart.png")
    parser.add_argument("--batch-size", type=int, default=32, help="completions per judge call (default: 32)")
    parser.add_argument(
        "--score-field",
        choices=SCORE_FIELDS,
        default="score",
        help="what ranks the completions: the judge's score in [0, 1], or a scalar judge's raw_reward "
        "(RewardBench 2 ranks classifiers by raw reward: the order is the same, the Ties margin "
        "terms differ) (default: score)",
    )
    parser.add_argument("--row-scores", action="store_true", help="also write every row's scores into results.json")
    parser.add_argument(
        "--chance-draws",
        type=int,
        default=100,
        help="random judges averaged for the Ties chance level; best-of-N chance is exact (default: 100)",
    )
    parser.add_argument("--chance-seed", type=int, default=0, help="seed of those random judges (default: 0)")
    http = parser.add_argument_group("judge server", "score through the HTTP API of a running judge server")
    http.add_argument("--judge-url", help="base URL of the judge server, e.g. http://127.0.0.1:8888")
    http.add_argument("--api-key", help=f"bearer key of the judge server (default: env {API_KEY_ENV})")
    http.add_argument(
        "--timeout", type=float, default=300.0, help="seconds one /batch_judge call may take (default: 300)"
    )
    http.add_argument(
        "--max-retries",
        type=int,
        default=2,
        help="retries of a call after a timeout, connection error, 429 or 5xx; then its rows fail (default: 2)",
    )
    http.add_argument("--concurrency", type=int, default=1, help="/batch_judge calls in flight at once (default: 1)")
    add_arguments(parser, JudgeConfig)  # the in-process judge: the very flags of `python -m serving`
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = EvaluationOptions(
            args.data, args.out, args.batch_size, args.score_field, args.row_scores, args.chance_draws, args.chance_seed
        )
        source = judge_source(args)
    except ValueError as err:
        parser.error(str(err))
    try:
        rows = load_rows(options.data)
        with open_judge(source) as backend:
            result = evaluate(rows, backend, options, config_record(source), file_digest(options.data))
    except (DataError, EvaluationError) as err:
        raise SystemExit(f"error: {err}") from None
    paths = write_outputs(result)
    print(paths["markdown"].read_text())
    for kind, path in paths.items():
        print(f"{kind:>8}: {path}")


JudgeSource = HttpJudgeOptions | JudgeConfig


def judge_source(args: argparse.Namespace) -> JudgeSource:
    """A running server's options (--judge-url), or the config of a judge loaded here (--model, --judge)."""
    if args.judge_url:
        if args.model or args.judge:
            raise ValueError("give --judge-url (a running server) or --model/--judge (in-process), not both")
        api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
        return HttpJudgeOptions(args.judge_url, api_key, args.timeout, args.max_retries, args.concurrency)
    if not (args.model or args.judge == "rule"):
        raise ValueError("name the judge: --judge-url URL, or --model DIR")
    return from_arguments(JudgeConfig, args)


@contextlib.contextmanager
def open_judge(source: JudgeSource) -> Iterator[JudgeBackend]:
    if isinstance(source, JudgeConfig):
        yield InProcessJudge(source)
        return
    with HttpJudge(source) as judge:
        yield judge


def config_record(source: JudgeSource) -> dict:
    """How the judge was reached and configured, for results.json (never the API key)."""
    if isinstance(source, JudgeConfig):
        return {"in_process": dataclasses.asdict(source)}
    record = dataclasses.asdict(source)
    record["api_key"] = "set" if source.api_key else None
    return {"http": record}
