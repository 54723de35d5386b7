"""`python -m evaluation`: score a judge on a RewardBench 2-schema parquet file, through a
running judge server (--judge-url) or in this process from a model directory (--model)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator, Sequence

from judge_rewards.settings import build_parser, from_arguments
from serving.config import JudgeConfig

from .data import DataError, file_digest, load_rows
from .judges import EvaluationError, HttpJudge, HttpJudgeOptions, InProcessJudge, JudgeBackend
from .report import write_outputs
from .run import EvaluationOptions, evaluate

# The in-process judge takes the very flags of `python -m serving`.
CONFIG_CLASSES = (EvaluationOptions, HttpJudgeOptions, JudgeConfig)

JudgeSource = HttpJudgeOptions | JudgeConfig


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser("python -m evaluation", __doc__, CONFIG_CLASSES)
    arguments = parser.parse_args(argv)
    try:
        options = from_arguments(EvaluationOptions, arguments)
        source = judge_source(arguments)
    except ValueError as err:
        parser.error(str(err))
    try:
        rows = load_rows(options.data, options.reference_column)
        with open_judge(source, options.batch_size) as backend:
            result = evaluate(rows, backend, options, config_record(source), file_digest(options.data))
    except (DataError, EvaluationError) as err:
        raise SystemExit(f"error: {err}") from None
    paths = write_outputs(result)
    print(paths["markdown"].read_text())
    for kind, path in paths.items():
        print(f"{kind:>8}: {path}")


def judge_source(arguments: argparse.Namespace) -> JudgeSource:
    """A running server's options (--judge-url), or the config of a judge loaded here (--model, --judge)."""
    server = from_arguments(HttpJudgeOptions, arguments)
    if server.judge_url:
        if arguments.model or arguments.judge:
            raise ValueError("give --judge-url (a running server) or --model/--judge (in-process), not both")
        return server
    if not (arguments.model or arguments.judge == "rule"):
        raise ValueError("name the judge: --judge-url URL, or --model DIR")
    return from_arguments(JudgeConfig, arguments)


@contextlib.contextmanager
def open_judge(source: JudgeSource, batch_size: int) -> Iterator[JudgeBackend]:
    if isinstance(source, JudgeConfig):
        yield InProcessJudge(source)
        return
    with HttpJudge(source, batch_size) as judge:
        yield judge


def config_record(source: JudgeSource) -> dict:
    """How the judge was reached and configured, for results.json (never the API key)."""
    if isinstance(source, JudgeConfig):
        return {"in_process": dataclasses.asdict(source)}
    record = dataclasses.asdict(source)
    record["api_key"] = "set" if source.api_key else None
    return {"http": record}
