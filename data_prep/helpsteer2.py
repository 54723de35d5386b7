"""HelpSteer2 (nvidia/HelpSteer2) to SFT, Bradley-Terry, GRPO pointwise / pairwise and attribute datasets.

Inputs: the ratings files (`train.jsonl.gz`, `validation.jsonl.gz`: prompt, response and five 0-4
attributes) and the preference file (`preference/preference.jsonl.gz`: split, prompt, response_1,
response_2, preference_strength -3..3, negative = response_1 better).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from data_prep import outputs
from data_prep.records import Record, UsageError, hub_records, read_records
from judge_core.settings import option

DATA_SOURCE_POINTWISE = "helpsteer2/pointwise"
DATA_SOURCE_PAIRWISE = "helpsteer2/pairwise"
TURN_SEPARATOR = "\n<extra_id_1>"
_ROLES = {"User": "user", "Assistant": "assistant"}


@dataclass(frozen=True)
class HelpSteer2Config:
    """How the HelpSteer2 rows are selected and arranged."""

    # 4: the anchor recipe's SFT rule (correctness >= 4); ties (strength 0) are never used
    sft_min_correctness: int = option(4, "SFT keeps responses rated at least this correct (0-4)")
    min_strength: int = option(1, "Bradley-Terry and pairwise keep pairs with |preference_strength| at least this")
    seed: int = option(0, "seed of the pairwise A/B positions")

    def __post_init__(self):
        if not 0 <= self.sft_min_correctness <= 4:
            raise UsageError(f"the SFT correctness threshold must be 0-4, got {self.sft_min_correctness}")
        if not 1 <= self.min_strength <= 3:
            raise UsageError(f"the minimum |preference_strength| must be 1-3, got {self.min_strength}")


@dataclass(frozen=True)
class Sources:
    """The three HelpSteer2 inputs as row iterables (generators: nothing is read before its turn)."""

    train: Iterable[Record]
    val: Iterable[Record]
    preference: Iterable[Record]

    @classmethod
    def from_files(cls, train: str | Path, val: str | Path, preference: str | Path) -> Sources:
        for path in (train, val, preference):
            if not Path(path).is_file():
                raise FileNotFoundError(f"input file {path} does not exist")
        return cls(read_records(train), read_records(val), read_records(preference))

    @classmethod
    def from_hub(cls, name: str) -> Sources:
        return cls(
            hub_records(name, "train"),
            hub_records(name, "validation"),
            hub_records(name, "train", data_dir="preference"),
        )


class PromptFormatError(ValueError):
    pass


def prompt_messages(prompt: str) -> list[dict]:
    """HelpSteer2's prompt text as chat turns: earlier turns are joined as
    `{user 1}\\n<extra_id_1>Assistant\\n{assistant 1}\\n<extra_id_1>User\\n{user 2}`."""
    first, *later = prompt.split(TURN_SEPARATOR)
    messages = [{"role": "user", "content": first}]
    for chunk in later:
        role_word, newline, content = chunk.partition("\n")
        if role_word not in _ROLES or not newline:
            raise PromptFormatError("a turn marker is not followed by 'User' or 'Assistant' and a newline")
        messages.append({"role": _ROLES[role_word], "content": content})
    expected = ["user" if i % 2 == 0 else "assistant" for i in range(len(messages))]
    if [m["role"] for m in messages] != expected or messages[-1]["role"] != "user":
        raise PromptFormatError("turns do not alternate user/assistant ending with a user turn")
    if any(not m["content"].strip() for m in messages):
        raise PromptFormatError("a turn is empty")
    return messages


def prompt_id(prompt: str) -> str:
    return hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:16]


def convert(sources: Sources, out_dir: str | Path, config: HelpSteer2Config = HelpSteer2Config()) -> outputs.Summary:
    summary = outputs.Summary("helpsteer2", Path(out_dir))
    for split, records in (("train", sources.train), ("val", sources.val)):
        ratings = _convert_ratings(records, split, config, summary)
        for dataset, rows in ratings.items():
            summary.add_split(dataset, split, rows)
    preferences = _read_preferences(sources.preference, config, summary)
    for split in outputs.SPLITS:
        chosen_first = [p for p in preferences if p.split == split]
        summary.add_split(
            outputs.BRADLEY_TERRY,
            split,
            [outputs.bradley_terry_row(p.prompt, p.chosen, p.rejected, abs(p.strength)) for p in chosen_first],
        )
        positions = outputs.balanced_positions(len(chosen_first), random.Random(f"{config.seed}/{split}"))
        summary.add_split(
            outputs.PAIRWISE,
            split,
            [
                outputs.pairwise_row(DATA_SOURCE_PAIRWISE, p.prompt, p.chosen, p.rejected, chosen_is_a, p.origin)
                for p, chosen_is_a in zip(chosen_first, positions, strict=True)
            ],
        )
    return summary.save()


def _subset(messages: list[dict]) -> str:
    return "multi_turn" if len(messages) > 1 else "single_turn"


def _parsed_prompt(record: Record, summary: outputs.Summary, affected: tuple[str, ...]) -> list[dict] | None:
    try:
        return prompt_messages(record.text("prompt"))
    except PromptFormatError as err:
        for output in affected:
            summary.skip(output, f"prompt not parsable as turns ({err})")
        return None


def _convert_ratings(
    records: Iterable[Record], split: str, config: HelpSteer2Config, summary: outputs.Summary
) -> dict[str, list[dict]]:
    """The sft, grpo/pointwise and attributes rows of one split's ratings file."""
    rows = {outputs.SFT: [], outputs.POINTWISE: [], outputs.ATTRIBUTES: []}
    for record in records:
        response = record.text("response")
        scores = {name: record.integer(name, 0, 4) for name in outputs.ATTRIBUTE_NAMES}
        messages = _parsed_prompt(record, summary, tuple(rows))
        if messages is None:
            continue
        if not response.strip():
            for output in rows:
                summary.skip(output, "empty response")
            continue
        origin = outputs.RowOrigin(prompt_id(record.data["prompt"]), _subset(messages), record.where)
        rows[outputs.POINTWISE].append(
            outputs.pointwise_row(DATA_SOURCE_POINTWISE, messages, response, scores["helpfulness"], origin)
        )
        rows[outputs.ATTRIBUTES].append(outputs.attributes_row(messages, response, scores))
        if scores["correctness"] >= config.sft_min_correctness:
            rows[outputs.SFT].append(outputs.sft_row(messages, response))
        else:
            summary.skip(outputs.SFT, f"correctness below {config.sft_min_correctness}")
    return rows


@dataclass(frozen=True)
class _Preference:
    split: str
    origin: outputs.RowOrigin
    prompt: list[dict]
    chosen: str
    rejected: str
    strength: int


def _read_preferences(
    records: Iterable[Record], config: HelpSteer2Config, summary: outputs.Summary
) -> list[_Preference]:
    affected = (outputs.BRADLEY_TERRY, outputs.PAIRWISE)
    preferences = []
    for record in records:
        split = record.choice("split", outputs.SPLITS)
        response_1, response_2 = record.text("response_1"), record.text("response_2")
        strength = record.integer("preference_strength", -3, 3)
        messages = _parsed_prompt(record, summary, affected)
        if messages is None:
            continue
        reason = _unusable_preference(strength, response_1, response_2, config)
        if reason:
            for output in affected:
                summary.skip(output, reason)
            continue
        chosen, rejected = (response_1, response_2) if strength < 0 else (response_2, response_1)
        origin = outputs.RowOrigin(prompt_id(record.data["prompt"]), _subset(messages), record.where)
        preferences.append(_Preference(split, origin, messages, chosen, rejected, strength))
    return preferences


def _unusable_preference(strength: int, response_1: str, response_2: str, config: HelpSteer2Config) -> str | None:
    if strength == 0:
        return "tie (preference_strength 0)"
    if abs(strength) < config.min_strength:
        return f"|preference_strength| below {config.min_strength}"
    if not response_1.strip() or not response_2.strip():
        return "empty response"
    return None
