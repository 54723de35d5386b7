"""`python -m evaluation`: score a judge on a RewardBench 2-schema parquet file, through a
running judge server (--judge-url), in this process from a model directory (--model), or a language model's own
likelihood of each completion as the baseline judge (--likelihood-model)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator, Sequence

from judge_core.settings import build_parser, from_arguments
from judge_models.config import JudgeConfig

from .data import DataError, file_digest, load_rows
from .judges import (
    EvaluationError,
    HttpJudge,
    HttpJudgeOptions,
    InProcessJudge,
    JudgeBackend,
    LikelihoodJudge,
    LikelihoodOptions,
)
from .report import write_outputs
from .run import EvaluationOptions, evaluate

# The in-process judge takes the very flags of `python -m serving`.
CONFIG_CLASSES = (EvaluationOptions, HttpJudgeOptions, LikelihoodOptions, JudgeConfig)

JudgeSource = HttpJudgeOptions | JudgeConfig | LikelihoodOptions


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
    """A running server's options (--judge-url), the config of a judge loaded here (--model, --judge), or the
    model whose likelihood judges (--likelihood-model): exactly one."""
    server = from_arguments(HttpJudgeOptions, arguments)
    likelihood = from_arguments(LikelihoodOptions, arguments)
    given = [
        name
        for name, value in (
            ("--judge-url", server.judge_url),
            ("--likelihood-model", likelihood.likelihood_model),
            ("--model/--judge", arguments.model or arguments.judge),
        )
        if value
    ]
    if len(given) > 1:
        raise ValueError(f"give one judge: {' and '.join(given)} were both given")
    if server.judge_url:
        return server
    if likelihood.likelihood_model:
        return likelihood
    if not (arguments.model or arguments.judge == "rule"):
        raise ValueError("name the judge: --judge-url URL, --model DIR or --likelihood-model DIR")
    return from_arguments(JudgeConfig, arguments)


@contextlib.contextmanager
def open_judge(source: JudgeSource, batch_size: int) -> Iterator[JudgeBackend]:
    if isinstance(source, JudgeConfig):
        yield InProcessJudge(source)
        return
    if isinstance(source, LikelihoodOptions):
        yield LikelihoodJudge(source)
        return
    with HttpJudge(source, batch_size) as judge:
        yield judge


def config_record(source: JudgeSource) -> dict:
    """How the judge was reached and configured, for results.json (never the API key)."""
    if isinstance(source, JudgeConfig):
        return {"in_process": dataclasses.asdict(source)}
    if isinstance(source, LikelihoodOptions):
        return {"likelihood": dataclasses.asdict(source)}
    record = dataclasses.asdict(source)
    record["api_key"] = "set" if source.api_key else None
    return {"http": record}
