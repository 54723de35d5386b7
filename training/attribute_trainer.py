"""Multi-aspect judge training: attribute regression on verl's FSDP SFT trainer.

    torchrun --nproc_per_node=N -m training.attribute_trainer [key=value ...]   (config: configs/attributes.yaml)

`AttributeTrainer` is the regression loss on the scalar-head trainer base (training/scalar_head_trainer.py,
shared with Bradley-Terry). What is specific to attributes:

- model: one label per attribute (attributes.names, HelpSteer2's five by default), named in the model config's
  id2label; all of them are read at the last token that is not the pad token, as the judge server reads them.
- data: a `conversation` (a JSON string of messages ending with the assistant's response) and one rating per
  attribute on HelpSteer2's 0..4 scale, every row checked before training starts.
- forwards: each rank sorts its conversations by length and splits them into micro-batches of
  data.micro_batch_size_per_gpu, each cut to its own longest sequence.
- loss: the mean over attributes of (output - rating)^2, averaged over conversations.
- metrics: train/loss, val/loss and, per attribute, val/mse/<name> and val/pearson/<name> (Pearson r over the
  whole validation set), from sums over all ranks, so exact on any world size.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import hydra
import torch
from tensordict import TensorDict

from judge_core.protocol import templates
from judge_core.protocol.judge_spec import ATTRIBUTE_MAX
from judge_models.scalar_model import padded_outputs, right_padded
from training.attributes import check_names
from training.scalar_head_trainer import (
    ScalarHeadTrainer,
    SequenceLimits,
    TokenizedConversations,
    TrainingDataError,
    length_sorted_micro_batches,
    parse_conversation,
    read_columns,
    run_main,
)

CONVERSATION_FIELD = "conversation"
# Sums per attribute, after the loss and row count: Pearson r is exact from them over any split of the rows.
ATTRIBUTE_SUMS = ("squared_error", "output", "rating", "output_squared", "rating_squared", "product")


@dataclass(frozen=True)
class AttributeDataConfig(SequenceLimits):
    """How attribute files become token ids and ratings."""

    names: tuple[str, ...]  # the rating columns, in the model's output order


class AttributeDataError(TrainingDataError):
    """An attribute file that cannot be trained on; the message names the file, the row and the field."""


# --- data --------------------------------------------------------------------------------------------


def parse_rating(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= ATTRIBUTE_MAX:
        raise AttributeDataError(f"{where}: expected a finite rating between 0 and {ATTRIBUTE_MAX:g}, got {value!r}")
    return float(value)


def read_attribute_rows(path: str, names: Sequence[str]) -> list[tuple[list[dict], list[float]]]:
    """The rows of an attribute file as (messages, ratings in `names` order)."""
    rows = []
    for index, row in enumerate(read_columns(path, [CONVERSATION_FIELD, *names], AttributeDataError)):
        where = f"{path} row {index} field"
        messages = parse_conversation(row[CONVERSATION_FIELD], f"{where} {CONVERSATION_FIELD}", AttributeDataError)
        rows.append((messages, [parse_rating(row[name], f"{where} {name}") for name in names]))
    return rows


class AttributeDataset(TokenizedConversations):
    """Tokenized rated conversations of one or more parquet files; item i is (ids, ratings (attributes,))."""

    error = AttributeDataError
    unit = "conversations"
    config: AttributeDataConfig

    def _read_file(self, path: str, tokenizer) -> list[tuple[torch.Tensor, torch.Tensor]]:
        rows = read_attribute_rows(path, self.config.names)
        encoded = templates.conversation_token_ids(tokenizer, [messages for messages, _ in rows])
        return [
            (self._fit(ids, f"{path} row {index} field {CONVERSATION_FIELD}"), torch.tensor(ratings))
            for index, (ids, (_, ratings)) in enumerate(zip(encoded, rows, strict=True))
        ]

    def _sequences(self, item: tuple) -> Sequence[torch.Tensor]:
        return item[:1]


class AttributeCollator:
    """Stacks conversations into right-padded input_ids / attention_mask (rows, longest sequence) and their
    ratings (rows, attributes)."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, items: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = right_padded([ids for ids, _ in items], self.pad_token_id)
        ratings = torch.stack([ratings for _, ratings in items]).float()
        return {"input_ids": input_ids, "attention_mask": attention_mask, "ratings": ratings}


# --- forward, loss and metrics -----------------------------------------------------------------------


def micro_batch_outputs(model, micro_batch: TensorDict) -> torch.Tensor:
    """The model's outputs (rows, attributes) for a micro-batch cut to its own longest sequence."""
    attention_mask = micro_batch["attention_mask"]
    length = int(attention_mask.sum(-1).max())
    return padded_outputs(model, micro_batch["input_ids"][:, :length], attention_mask[:, :length])


def regression_losses(outputs: torch.Tensor, ratings: torch.Tensor) -> torch.Tensor:
    """Per-row loss: the mean over attributes of the squared error, for outputs and ratings (rows, attributes)."""
    return (outputs - ratings).pow(2).mean(-1)


def attribute_totals(losses: torch.Tensor, outputs: torch.Tensor, ratings: torch.Tensor) -> torch.Tensor:
    """The sums of one forward, float64: the loss, the rows, then ATTRIBUTE_SUMS per attribute."""
    x, y = outputs.detach().double(), ratings.double()
    per_attribute = torch.stack([(x - y).pow(2), x, y, x * x, y * y, x * y], dim=-1).sum(0)  # (attributes, sums)
    head = torch.tensor([losses.detach().double().sum().item(), len(losses)], dtype=torch.float64)
    return torch.cat([head.to(x.device), per_attribute.flatten()])


def pearson(n: float, x: float, y: float, xx: float, yy: float, xy: float) -> float:
    """Pearson r from the sums of x, y, x^2, y^2 and xy over n points; nan where either side is constant."""
    spread = (n * xx - x * x) * (n * yy - y * y)
    return (n * xy - x * y) / math.sqrt(spread) if spread > 0 else math.nan


def attribute_metrics(totals: torch.Tensor, names: Sequence[str], prefix: str) -> dict[str, float]:
    """<prefix>/loss, and per attribute <prefix>/mse/<name> and <prefix>/pearson/<name>."""
    loss, rows = totals[:2].tolist()
    metrics = {f"{prefix}/loss": loss / rows}
    for name, values in zip(names, totals[2:].view(len(names), len(ATTRIBUTE_SUMS)).tolist(), strict=True):
        sums = dict(zip(ATTRIBUTE_SUMS, values, strict=True))
        metrics[f"{prefix}/mse/{name}"] = sums["squared_error"] / rows
        metrics[f"{prefix}/pearson/{name}"] = pearson(
            rows, sums["output"], sums["rating"], sums["output_squared"], sums["rating_squared"], sums["product"]
        )
    return metrics


# --- trainer -----------------------------------------------------------------------------------------


def attribute_names(config) -> tuple[str, ...]:
    try:
        return check_names(list(config.attributes.names))
    except ValueError as err:
        raise ValueError(f"attributes.names: {err}") from err


class AttributeTrainer(ScalarHeadTrainer):
    trainer_name = "attribute"

    def __init__(self, config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset):
        self.attributes = attribute_names(config)
        super().__init__(config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset)

    def _collator(self) -> AttributeCollator:
        return AttributeCollator(self.tokenizer.pad_token_id)

    def _set_labels(self, model_config) -> None:
        model_config.id2label = dict(enumerate(self.attributes))
        model_config.label2id = {name: index for index, name in enumerate(self.attributes)}

    def _describe(self) -> str:
        size = self.config.data.micro_batch_size_per_gpu
        attributes = ", ".join(self.attributes)
        return f"mean squared error on {len(self.attributes)} attributes ({attributes}); micro-batches of {size}"

    def _forwards(self, batch: TensorDict) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for micro_batch in length_sorted_micro_batches(batch, self.config.data.micro_batch_size_per_gpu):
            outputs = micro_batch_outputs(self.fsdp_model, micro_batch)
            losses = regression_losses(outputs, micro_batch["ratings"])
            yield losses, attribute_totals(losses, outputs, micro_batch["ratings"])

    def _train_metrics(self, totals: torch.Tensor) -> dict[str, float]:
        return {"train/loss": attribute_metrics(totals, self.attributes, "train")["train/loss"]}

    def _validation_metrics(self, totals: torch.Tensor) -> dict[str, float]:
        return attribute_metrics(totals, self.attributes, "val")


# --- entry point -------------------------------------------------------------------------------------


def load_attribute_datasets(config, tokenizer) -> tuple[AttributeDataset, AttributeDataset]:
    data_config = AttributeDataConfig(
        max_length=config.data.max_length, truncation=config.data.truncation, names=attribute_names(config)
    )
    return (
        AttributeDataset(config.data.train_files, tokenizer, data_config),
        AttributeDataset(config.data.val_files, tokenizer, data_config),
    )


@hydra.main(config_path="configs", config_name="attributes", version_base=None)
def main(config) -> None:
    """The trainer's entry point; the launcher starts it on its resolved config snapshot, a direct run on
    configs/attributes.yaml (whose interpolations need the launcher's resolvers)."""
    run_main(config, load_attribute_datasets, AttributeTrainer, "attribute_trainer")


if __name__ == "__main__":
    main()
