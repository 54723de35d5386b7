"""Bradley-Terry judge training on verl's FSDP SFT trainer.

    torchrun --nproc_per_node=N -m training.bt_trainer [key=value ...]   (config: configs/bradley_terry.yaml)

`BradleyTerryTrainer` is the pairs' loss on the scalar-head trainer base (training/scalar_head_trainer.py:
verl's FSDPSFTTrainer with its config, device mesh, sampler, checkpoints with resume, tracking and `fit()`,
the FSDP / FSDP2 model, optimizer and LR schedules, metrics summed over ranks). What is specific to pairs:

- model: one label, whose reward is read at the last token that is not the pad token. The export writes the
  same class and weight names, so a trained and an exported model give the same reward, and verl's
  reward-model worker (`AutoModelForTokenClassification`) loads it.
- data: pairs of conversations tokenized through the chat template exactly as the judge server does.
  Longer sequences than data.max_length are truncated or refused, and counted.
- forwards (bt.packing, on by default): each pair is packed as its shared prompt once and both responses,
  several pairs per forward up to bt.max_tokens_per_forward tokens, with no padding (training/packing.py).
  Unpacked: each rank sorts its pairs by length before splitting them into micro-batches, each cut to its
  own longest sequence (train/padding_share says what padding is left).
- loss: -log sigmoid(r_chosen - r_rejected), optionally using the data's per-pair `margin` (bt.margin_mode).
- metrics: train/loss, train/accuracy, val/loss, val/accuracy (and reward gap, grad norm, padding share, real,
  useful and computed tokens per step), summed over all ranks on every device.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import hydra
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from judge_core.protocol import templates
from judge_models.packing import PackedRow, use_packed_attention
from judge_models.scalar_model import padded_rewards, right_padded
from training import packing
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

PAIR_FIELDS = ("chosen", "rejected")
MARGIN_FIELD = "margin"
MARGIN_MODES = ("none", "scaled", "offset")
# Per-batch sums reduced over ranks, in this order: metrics are ratios of these sums, exact on any world size.
# tokens: of both sequences of each pair; useful: each pair's prompt once and both responses; computed: the
# positions the model computed; padding: those of them that were padding.
TOTALS = ("loss", "correct", "pairs", "reward_gap", "tokens", "useful", "computed", "padding")


@dataclass(frozen=True)
class BradleyTerryConfig:
    """The `bt` section of configs/bradley_terry.yaml."""

    margin_mode: str = "none"  # none: -logσ(Δ); scaled: -m·logσ(Δ) ("scaled BT"); offset: -logσ(Δ - m)
    packing: bool = True  # shared prompt once, no padding, pairs packed per forward (training/packing.py)
    max_tokens_per_forward: int | None = None  # packed tokens per forward; None: a padded micro-batch's most

    def __post_init__(self):
        if self.margin_mode not in MARGIN_MODES:
            raise ValueError(f"bt.margin_mode must be one of {MARGIN_MODES}, got {self.margin_mode!r}")
        if not isinstance(self.packing, bool):
            raise ValueError(f"bt.packing must be true or false, got {self.packing!r}")
        budget = self.max_tokens_per_forward
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 2):
            raise ValueError(f"bt.max_tokens_per_forward must be an integer >= 2 or null, got {budget!r}")

    def token_budget(self, micro_batch_size: int, max_length: int) -> int:
        """Tokens per packed forward: the setting, or what a padded micro-batch computes at most."""
        return self.max_tokens_per_forward or micro_batch_size * 2 * max_length


@dataclass(frozen=True)
class PairDataConfig(SequenceLimits):
    """How pair files become token ids (max_length: each side of a pair)."""

    need_margin: bool  # the loss reads the `margin` column, so every row must have a valid one


class PairDataError(TrainingDataError):
    """A pair file that cannot be trained on; the message names the file, the row and the field."""


# --- data --------------------------------------------------------------------------------------------


def parse_margin(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise PairDataError(f"{where}: margin must be a finite number >= 0, got {value!r}")
    return float(value)


def read_pair_rows(path: str, need_margin: bool) -> list[dict]:
    """The rows of a pair file as {"chosen": messages, "rejected": messages, "margin": float}; the margin
    is 0.0 where the loss does not use it."""
    required = list(PAIR_FIELDS) + ([MARGIN_FIELD] if need_margin else [])
    rows = []
    for index, row in enumerate(read_columns(path, required, PairDataError)):
        where = f"{path} row {index} field"
        rows.append(
            {
                **{field: parse_conversation(row[field], f"{where} {field}", PairDataError) for field in PAIR_FIELDS},
                MARGIN_FIELD: parse_margin(row[MARGIN_FIELD], f"{where} {MARGIN_FIELD}") if need_margin else 0.0,
            }
        )
    return rows


class PairDataset(TokenizedConversations):
    """Tokenized preference pairs of one or more parquet files; item i is (chosen ids, rejected ids, margin)."""

    error = PairDataError
    unit = "pairs"
    config: PairDataConfig

    @property
    def pairs(self) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
        return self.items

    def _read_file(self, path: str, tokenizer) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
        rows = read_pair_rows(path, self.config.need_margin)
        encoded = {
            field: templates.conversation_token_ids(tokenizer, [row[field] for row in rows]) for field in PAIR_FIELDS
        }
        pairs = []
        for index, row in enumerate(rows):
            chosen, rejected = (
                self._fit(encoded[field][index], f"{path} row {index} field {field}") for field in PAIR_FIELDS
            )
            pairs.append((chosen, rejected, row[MARGIN_FIELD]))
        return pairs

    def _sequences(self, item: tuple) -> Sequence[torch.Tensor]:
        return item[:2]


class PairCollator:
    """Stacks pairs into input_ids / attention_mask of shape (pairs, 2, longest sequence of the batch),
    right-padded, and margin (pairs,). Side 0 is chosen, side 1 rejected."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, items: list[tuple[torch.Tensor, torch.Tensor, float]]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = right_padded([ids for item in items for ids in item[:2]], self.pad_token_id)
        margin = torch.tensor([item[2] for item in items], dtype=torch.float32)
        pairs_shape = (len(items), 2, input_ids.shape[-1])
        return {
            "input_ids": input_ids.view(pairs_shape),
            "attention_mask": attention_mask.view(pairs_shape),
            "margin": margin,
        }


def pair_rewards(model, micro_batch: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's rewards (pairs, 2) in fp32, and the attention mask of the sequences as they were computed:
    the micro-batch cut to its own longest sequence, read as the judge server reads it (scalar_model)."""
    attention_mask = micro_batch["attention_mask"]
    length = int(attention_mask.sum(-1).max())
    attention_mask = attention_mask[..., :length].reshape(-1, length)
    input_ids = micro_batch["input_ids"][..., :length].reshape(-1, length)
    return padded_rewards(model, input_ids, attention_mask).view(-1, 2), attention_mask


def batch_pairs(batch: TensorDict) -> list[tuple[list[int], list[int]]]:
    """The (chosen ids, rejected ids) of a collated batch, without their padding."""
    lengths = batch["attention_mask"].sum(-1).tolist()
    rows = batch["input_ids"].tolist()
    return [(pair[0][: length[0]], pair[1][: length[1]]) for pair, length in zip(rows, lengths, strict=True)]


def padded_token_counts(micro_batch: TensorDict, attention_mask: torch.Tensor) -> list[int]:
    """tokens, useful, computed, padding (TOTALS' order) of a padded forward; attention_mask as computed."""
    tokens = int(attention_mask.sum())
    useful = sum(packing.useful_tokens(chosen, rejected) for chosen, rejected in batch_pairs(micro_batch))
    return [tokens, useful, attention_mask.numel(), attention_mask.numel() - tokens]


def packed_token_counts(pairs: list[tuple[list[int], list[int]]], row: PackedRow) -> list[int]:
    """tokens, useful, computed, padding of a packed forward: it computes the useful tokens only."""
    tokens = sum(len(pairs[index][0]) + len(pairs[index][1]) for index in row.groups)
    return [tokens, row.tokens, row.tokens, 0]


def pair_forwards(
    model, batch: TensorDict, bt: BradleyTerryConfig, micro_batch_size: int, max_length: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[int]]]:
    """Per forward over the batch's pairs: rewards (pairs, 2), their margins and their token counts. Packed
    (bt.packing): rows of at most bt.token_budget tokens; else length-sorted micro-batches of
    `micro_batch_size` pairs, each cut to its longest sequence."""
    if bt.packing:
        pairs = batch_pairs(batch)
        device = batch["input_ids"].device
        for row in packing.pack_pairs(pairs, bt.token_budget(micro_batch_size, max_length), device):
            margins = batch["margin"][torch.tensor(row.groups, device=device)]
            yield packing.packed_rewards(model, row), margins, packed_token_counts(pairs, row)
        return
    for micro_batch in length_sorted_micro_batches(batch, micro_batch_size):
        rewards, attention_mask = pair_rewards(model, micro_batch)
        yield rewards, micro_batch["margin"], padded_token_counts(micro_batch, attention_mask)


# --- loss and metrics --------------------------------------------------------------------------------


def bradley_terry_losses(rewards: torch.Tensor, margins: torch.Tensor, margin_mode: str) -> torch.Tensor:
    """Per-pair loss for rewards of shape (pairs, 2) (chosen, rejected)."""
    gap = rewards[:, 0] - rewards[:, 1]
    if margin_mode == "offset":
        return -F.logsigmoid(gap - margins)
    losses = -F.logsigmoid(gap)
    return losses * margins if margin_mode == "scaled" else losses


def pair_totals(losses: torch.Tensor, rewards: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """The TOTALS sums of one forward; counts: its tokens, useful, computed and padding positions. A tie
    (equal rewards) counts as a wrong prediction."""
    gap = (rewards[:, 0] - rewards[:, 1]).detach()
    values = [losses.detach().sum(), (gap > 0).sum(), len(losses), gap.sum(), *counts]
    return torch.stack([torch.as_tensor(v, dtype=torch.float64, device=gap.device) for v in values])


def pair_metrics(totals: torch.Tensor, prefix: str) -> dict[str, float]:
    sums = dict(zip(TOTALS, totals.tolist(), strict=True))
    return {
        f"{prefix}/loss": sums["loss"] / sums["pairs"],
        f"{prefix}/accuracy": sums["correct"] / sums["pairs"],
        f"{prefix}/reward_gap": sums["reward_gap"] / sums["pairs"],
    }


def padding_share(totals: torch.Tensor) -> float:
    sums = dict(zip(TOTALS, totals.tolist(), strict=True))
    return sums["padding"] / sums["computed"]


def token_counts(totals: torch.Tensor, prefix: str) -> dict[str, float]:
    """Real tokens (both sequences of each pair), useful tokens (each prompt once and both responses) and
    computed positions (padding included): a step's throughput is any of them over its time."""
    sums = dict(zip(TOTALS, totals.tolist(), strict=True))
    return {
        f"{prefix}/real_tokens": sums["tokens"],
        f"{prefix}/useful_tokens": sums["useful"],
        f"{prefix}/computed_tokens": sums["computed"],
    }


# --- trainer -----------------------------------------------------------------------------------------


class BradleyTerryTrainer(ScalarHeadTrainer):
    trainer_name = "Bradley-Terry"

    def __init__(self, config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset):
        self.bt = BradleyTerryConfig(**config.bt)
        super().__init__(config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset)

    def _collator(self) -> PairCollator:
        return PairCollator(self.tokenizer.pad_token_id)

    def _set_labels(self, model_config) -> None:
        model_config.num_labels = 1

    def _configure_model(self, model) -> None:
        if self.bt.packing:
            use_packed_attention(model)

    def _describe(self) -> str:
        data = self.config.data
        if self.bt.packing:
            budget = self.bt.token_budget(data.micro_batch_size_per_gpu, data.max_length)
            forwards = f"packed forwards of at most {budget} tokens (each prompt once, no padding)"
        else:
            forwards = f"padded micro-batches of {data.micro_batch_size_per_gpu} pairs"
        return f"margin mode {self.bt.margin_mode}; {forwards}"

    def _forwards(self, batch: TensorDict) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        data = self.config.data
        for rewards, margins, counts in pair_forwards(
            self.fsdp_model, batch, self.bt, data.micro_batch_size_per_gpu, data.max_length
        ):
            losses = bradley_terry_losses(rewards, margins, self.bt.margin_mode)
            yield losses, pair_totals(losses, rewards, counts)

    def _train_metrics(self, totals: torch.Tensor) -> dict[str, float]:
        return {
            **pair_metrics(totals, "train"),
            "train/padding_share": padding_share(totals),
            **token_counts(totals, "train"),
        }

    def _validation_metrics(self, totals: torch.Tensor) -> dict[str, float]:
        """val/loss, val/accuracy and val/reward_gap."""
        return pair_metrics(totals, "val")


# --- entry point -------------------------------------------------------------------------------------


def load_pair_datasets(config, tokenizer) -> tuple[PairDataset, PairDataset]:
    data_config = PairDataConfig(
        max_length=config.data.max_length,
        truncation=config.data.truncation,
        need_margin=BradleyTerryConfig(**config.bt).margin_mode != "none",
    )
    return (
        PairDataset(config.data.train_files, tokenizer, data_config),
        PairDataset(config.data.val_files, tokenizer, data_config),
    )


@hydra.main(config_path="configs", config_name="bradley_terry", version_base=None)
def main(config) -> None:
    """The trainer's entry point; the launcher starts it on its resolved config snapshot, a direct run on
    configs/bradley_terry.yaml (whose interpolations need the launcher's resolvers)."""
    run_main(config, load_pair_datasets, BradleyTerryTrainer, "bt_trainer")


if __name__ == "__main__":
    main()
