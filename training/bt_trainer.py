"""Bradley-Terry judge training on verl's FSDP SFT trainer.

    torchrun --nproc_per_node=N -m training.bt_trainer [key=value ...]   (config: configs/bradley_terry.yaml)

`BradleyTerryTrainer` subclasses verl 0.6.1's `FSDPSFTTrainer` and keeps its config, device mesh, sampler,
StatefulDataLoader, checkpoint manager (resume included), tracking and `fit()`, and builds the model with
verl's FSDP / FSDP2 wrapping helpers, `build_optimizer` and LR schedules. What is specific to pairs:

- model: `AutoModelForSequenceClassification` with one label, whose reward is read at the last token that
  is not the pad token. The export writes the same class and weight names, so a trained and an exported
  model give the same reward, and verl's reward-model worker (`AutoModelForTokenClassification`) loads it.
- data: pairs of conversations tokenized through the chat template exactly as the judge server does.
  Longer sequences than data.max_length are truncated or refused, and counted.
- forwards (bt.packing, on by default): each pair is packed as its shared prompt once and both responses,
  several pairs per forward up to bt.max_tokens_per_forward tokens, with no padding (training/packing.py).
  Unpacked: each rank sorts its pairs by length before splitting them into micro-batches, each cut to its
  own longest sequence (train/padding_share says what padding is left).
- loss: -log sigmoid(r_chosen - r_rejected), optionally using the data's per-pair `margin` (bt.margin_mode).
- metrics: train/loss, train/accuracy, val/loss, val/accuracy (and reward gap, grad norm, padding share, real,
  useful and computed tokens per step), summed over all ranks on every device; verl's SFT trainer reduces its loss on
  GPUs only.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import hydra
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed as dist
import torch.nn.functional as F
from tensordict import TensorDict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.tensor import DTensor
from torch.utils.data import Dataset, DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader
from transformers import AutoConfig, AutoModelForSequenceClassification
from transformers.utils import is_flash_attn_2_available
from verl.trainer import fsdp_sft_trainer
from verl.utils import hf_tokenizer
from verl.utils.device import get_device_id, get_device_name
from verl.utils.distributed import destroy_global_process_group, initialize_global_process_group
from verl.utils.fs import copy_to_local
from verl.utils.fsdp_utils import (
    CPUOffloadPolicy,
    MixedPrecisionPolicy,
    apply_fsdp2,
    fsdp2_clip_grad_norm_,
    fsdp2_load_full_state_dict,
    get_fsdp_wrap_policy,
    get_init_weight_context_manager,
    init_fn,
)
from verl.utils.torch_dtypes import PrecisionType
from verl.utils.torch_functional import get_cosine_schedule_with_warmup, get_wsd_schedule_with_warmup
from verl.workers.config.optimizer import build_optimizer

from judge_rewards.protocol import templates
from serving.judges.scalar_model import padded_rewards, right_padded
from training import cpu_compat, packing
from training.launch.config import register_resolvers

PAIR_FIELDS = ("chosen", "rejected")
MARGIN_FIELD = "margin"
TRUNCATIONS = ("left", "right", "error")
MARGIN_MODES = ("none", "scaled", "offset")
LR_SCHEDULES = {"cosine": get_cosine_schedule_with_warmup, "wsd": get_wsd_schedule_with_warmup}
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
class PairDataConfig:
    """How pair files become token ids."""

    max_length: int  # tokens per sequence (each side of a pair)
    truncation: str  # left | right | error, for sequences longer than max_length
    need_margin: bool  # the loss reads the `margin` column, so every row must have a valid one

    def __post_init__(self):
        if self.truncation not in TRUNCATIONS:
            raise ValueError(f"data.truncation must be one of {TRUNCATIONS}, got {self.truncation!r}")
        if self.max_length < 2:
            raise ValueError(f"data.max_length must be at least 2, got {self.max_length}")


class PairDataError(ValueError):
    """A pair file that cannot be trained on; the message names the file, the row and the field."""


# --- data --------------------------------------------------------------------------------------------


def parse_conversation(value, where: str) -> list[dict]:
    """A `chosen` / `rejected` cell (a JSON string of messages ending with the assistant's response)."""
    if not isinstance(value, str):
        raise PairDataError(f"{where}: expected a JSON string of messages, got {type(value).__name__}")
    try:
        messages = json.loads(value)
    except json.JSONDecodeError as err:
        raise PairDataError(f"{where}: not valid JSON ({err.msg} at character {err.pos})") from err
    if not isinstance(messages, list) or not messages:
        raise PairDataError(f"{where}: expected a non-empty JSON list of messages")
    try:
        messages = templates.as_messages(messages)
    except (TypeError, ValueError) as err:
        raise PairDataError(f"{where}: {err}") from err
    if messages[-1]["role"] != "assistant":
        raise PairDataError(f"{where}: the last message must be the assistant's response, not {messages[-1]['role']!r}")
    return messages


def parse_margin(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise PairDataError(f"{where}: margin must be a finite number >= 0, got {value!r}")
    return float(value)


def read_pair_rows(path: str, need_margin: bool) -> list[dict]:
    """The rows of a pair file as {"chosen": messages, "rejected": messages, "margin": float}; the margin
    is 0.0 where the loss does not use it."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise PairDataError(f"{path}: cannot read it as parquet: {err}") from err
    required = list(PAIR_FIELDS) + ([MARGIN_FIELD] if need_margin else [])
    missing = [name for name in required if name not in table.column_names]
    if missing:
        raise PairDataError(f"{path}: missing column(s) {missing}; it has {table.column_names}")
    rows = []
    for index, row in enumerate(table.select(required).to_pylist()):
        where = f"{path} row {index} field"
        rows.append(
            {
                **{field: parse_conversation(row[field], f"{where} {field}") for field in PAIR_FIELDS},
                MARGIN_FIELD: parse_margin(row[MARGIN_FIELD], f"{where} {MARGIN_FIELD}") if need_margin else 0.0,
            }
        )
    return rows


class PairDataset(Dataset):
    """Tokenized preference pairs of one or more parquet files; item i is (chosen ids, rejected ids, margin),
    the ids as int32 tensors (a Python list of ints would take seven times the memory on every rank)."""

    def __init__(self, files: str | Sequence[str], tokenizer, config: PairDataConfig):
        if tokenizer.pad_token_id is None:
            raise PairDataError("the tokenizer has no pad token; set one that differs from the content tokens")
        self.config = config
        self.pad_token_id = tokenizer.pad_token_id
        self.files = [files] if isinstance(files, str) else [str(f) for f in files]
        self.pairs: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        self.truncated: list[str] = []  # where each truncated sequence comes from
        for path in self.files:
            self._add_file(path, tokenizer)
        if not self.pairs:
            raise PairDataError(f"{', '.join(self.files)}: no pairs")

    def _add_file(self, path: str, tokenizer) -> None:
        rows = read_pair_rows(path, self.config.need_margin)
        encoded = {
            field: templates.conversation_token_ids(tokenizer, [row[field] for row in rows]) for field in PAIR_FIELDS
        }
        for index, row in enumerate(rows):
            chosen, rejected = (
                self._fit(encoded[field][index], f"{path} row {index} field {field}") for field in PAIR_FIELDS
            )
            self.pairs.append((chosen, rejected, row[MARGIN_FIELD]))

    def _fit(self, ids: list[int], where: str) -> torch.Tensor:
        """`ids` within max_length (per the truncation rule), checked to end with a token the reward can be
        read at: the model reads it at the last token that is not the pad token."""
        limit = self.config.max_length
        if len(ids) > limit:
            if self.config.truncation == "error":
                raise PairDataError(f"{where}: {len(ids)} tokens, more than max_length {limit} (truncation=error)")
            self.truncated.append(where)
            ids = ids[-limit:] if self.config.truncation == "left" else ids[:limit]
        if not ids or ids[-1] == self.pad_token_id:
            raise PairDataError(
                f"{where}: the sequence is empty or ends with the pad token (id {self.pad_token_id}); "
                "the reward is read at the last non-pad token, so the pad token must differ from it"
            )
        return torch.tensor(ids, dtype=torch.int32)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int):
        return self.pairs[index]

    def describe(self) -> str:
        lengths = sorted(len(ids) for pair in self.pairs for ids in pair[:2])
        text = (
            f"{', '.join(self.files)}: {len(self.pairs)} pairs, sequence length median {lengths[len(lengths) // 2]}, "
            f"max {lengths[-1]}; {len(self.truncated)} sequences longer than max_length {self.config.max_length}"
        )
        if self.truncated:
            text += f" truncated ({self.config.truncation}), e.g. {'; '.join(self.truncated[:3])}"
        return text


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


def length_sorted_micro_batches(batch: TensorDict, size: int) -> list[TensorDict]:
    """The batch's pairs, longest first, split into micro-batches of `size` pairs: similar lengths share a
    micro-batch, so cutting each to its own longest sequence leaves little padding."""
    lengths = batch["attention_mask"].sum(-1).amax(-1)
    order = torch.argsort(lengths, descending=True, stable=True)
    return list(batch[order].split(size))


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


def packed_token_counts(pairs: list[tuple[list[int], list[int]]], row: packing.PackedRow) -> list[int]:
    """tokens, useful, computed, padding of a packed forward: it computes the useful tokens only."""
    tokens = sum(len(pairs[index][0]) + len(pairs[index][1]) for index in row.pairs)
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
            margins = batch["margin"][torch.tensor(row.pairs, device=device)]
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


# --- model -------------------------------------------------------------------------------------------


def compute_dtype(device_name: str) -> torch.dtype:
    """bf16 on accelerators; on CPU the dtype of CPU mode (JUDGE_CPU_DTYPE, fp32 unless asked otherwise)."""
    if device_name == "cpu" and cpu_compat.cpu_dtype() == "fp32":
        return torch.float32
    return torch.bfloat16


def attention_implementation() -> str:
    return "flash_attention_2" if is_flash_attn_2_available() else "sdpa"


def check_supported(config) -> None:
    """verl SFT options this trainer does not implement are refused, not silently ignored."""
    refused = []
    if config.model.get("lora_rank", 0) > 0 or config.model.get("lora_adapter_path"):
        refused.append("LoRA (model.lora_rank, model.lora_adapter_path)")
    if config.model.get("use_liger"):
        refused.append("model.use_liger")
    if config.get("ulysses_sequence_parallel_size", 1) > 1 or config.get("use_remove_padding"):
        refused.append("ulysses_sequence_parallel_size > 1 / use_remove_padding (batches are length-grouped instead)")
    if config.data.custom_cls.get("path"):
        refused.append("data.custom_cls")
    if refused:
        raise ValueError("not supported by the Bradley-Terry trainer: " + "; ".join(refused))


class BradleyTerryTrainer(fsdp_sft_trainer.FSDPSFTTrainer):
    def __init__(self, config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset):
        check_supported(config)
        self.bt = BradleyTerryConfig(**config.bt)
        self._val_totals: torch.Tensor | None = None
        super().__init__(config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset)

    def _is_rank_zero(self) -> bool:
        return self.device_mesh.get_rank() == 0

    # data: verl's sampler and StatefulDataLoader, with the pair collator. The pairs are tokenized up front,
    # so loading a batch costs nothing and needs no worker processes.
    def _build_dataloader(self, train_dataset, val_dataset):
        self.train_dataset, self.val_dataset = train_dataset, val_dataset
        world_size = self.device_mesh.size()
        data = self.config.data
        _require_pairs(train_dataset, world_size * data.train_batch_size, "one global batch (data.train_batch_size)")
        _require_pairs(
            val_dataset,
            world_size * data.micro_batch_size_per_gpu,
            "one micro-batch per rank (ranks x data.micro_batch_size_per_gpu)",
        )
        self.train_sampler, self.train_dataloader = self._pair_loader(
            train_dataset, data.train_batch_size, shuffle=True
        )
        self.val_sampler, self.val_dataloader = self._pair_loader(
            val_dataset, data.micro_batch_size_per_gpu, shuffle=False
        )
        if self._is_rank_zero():
            used = len(self.val_dataloader) * world_size * data.micro_batch_size_per_gpu
            print(f"validation uses {used} of {len(val_dataset)} pairs (whole micro-batches on every rank)")

    def _pair_loader(self, dataset, batch_size: int, shuffle: bool) -> tuple[DistributedSampler, StatefulDataLoader]:
        """This rank's sampler and loader of `dataset` in whole batches of collated pairs."""
        sampler = DistributedSampler(
            dataset,
            shuffle=shuffle,
            num_replicas=self.device_mesh.size(),
            rank=self.device_mesh.get_rank(),
            drop_last=True,
        )
        loader = StatefulDataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            collate_fn=PairCollator(self.tokenizer.pad_token_id),
            num_workers=0,
            pin_memory=get_device_name() != "cpu",
            drop_last=True,
        )
        return sampler, loader

    # model: a 1-label sequence-classification head, wrapped with verl's FSDP / FSDP2 helpers
    def _build_model_optimizer(self):
        self.model = self._load_scoring_model()
        self.fsdp_model = self._shard(self.model)
        self.optimizer = build_optimizer(self.fsdp_model.parameters(), self.config.optim)
        self.steps_per_epoch = len(self.train_dataloader)
        self.total_steps = self.steps_per_epoch * self.config.trainer.total_epochs
        self.lr_scheduler = self._lr_scheduler()
        if self._is_rank_zero():
            print(
                f"{self.steps_per_epoch} steps per epoch, {self.total_steps} steps in the LR schedule; "
                f"compute dtype {compute_dtype(get_device_name())}, margin mode {self.bt.margin_mode}; "
                f"{self._forwards()}"
            )

    def _forwards(self) -> str:
        data = self.config.data
        if self.bt.packing:
            budget = self.bt.token_budget(data.micro_batch_size_per_gpu, data.max_length)
            return f"packed forwards of at most {budget} tokens (each prompt once, no padding)"
        return f"padded micro-batches of {data.micro_batch_size_per_gpu} pairs"

    def _load_scoring_model(self):
        model_settings = self.config.model
        local_path = copy_to_local(model_settings.partial_pretrain, verbose=self._is_rank_zero())
        model_config = AutoConfig.from_pretrained(local_path, trust_remote_code=model_settings.trust_remote_code)
        model_config.num_labels = 1
        model_config.pad_token_id = self.tokenizer.pad_token_id
        if hasattr(model_config, "max_position_embeddings"):
            model_config.max_position_embeddings = max(
                model_config.max_position_embeddings, self.config.data.max_length
            )
        init_context = get_init_weight_context_manager(
            use_meta_tensor=not model_config.tie_word_embeddings, mesh=self.device_mesh
        )
        with init_context():
            model = AutoModelForSequenceClassification.from_pretrained(
                local_path,
                config=model_config,
                torch_dtype=PrecisionType.to_dtype(model_settings.fsdp_config.get("model_dtype", "fp32")),
                attn_implementation=attention_implementation(),
                trust_remote_code=model_settings.trust_remote_code,
            )
        # Checkpoints save this config: it must name the scoring class, not the base model's causal LM.
        model.config.architectures = [type(model).__name__]
        if self.bt.packing:
            packing.use_packed_attention(model)
        if model_settings.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model

    def _shard(self, model):
        fsdp_config = self.config.model.fsdp_config
        dtype = compute_dtype(get_device_name())
        strategy = self.config.model.strategy
        if strategy == "fsdp":
            return FSDP(
                model,
                cpu_offload=CPUOffload(offload_params=fsdp_config.offload_params) if fsdp_config.cpu_offload else None,
                param_init_fn=init_fn,
                use_orig_params=False,
                auto_wrap_policy=get_fsdp_wrap_policy(model, config=fsdp_config.wrap_policy),
                device_id=get_device_id(),
                sharding_strategy=ShardingStrategy.FULL_SHARD,
                mixed_precision=MixedPrecision(
                    param_dtype=dtype, reduce_dtype=torch.float32, buffer_dtype=torch.float32
                ),
                sync_module_states=True,
                device_mesh=self.device_mesh,
                forward_prefetch=False,
            )
        if strategy == "fsdp2":
            offload_policy = CPUOffloadPolicy() if fsdp_config.cpu_offload else None
            fsdp_kwargs = {
                "mesh": self.device_mesh,
                "mp_policy": MixedPrecisionPolicy(
                    param_dtype=dtype, reduce_dtype=torch.float32, cast_forward_inputs=True
                ),
                "reshard_after_forward": True,
            }
            if offload_policy is not None:
                fsdp_kwargs["offload_policy"] = offload_policy
            full_state = model.state_dict()
            apply_fsdp2(model, fsdp_kwargs, fsdp_config)
            fsdp2_load_full_state_dict(model, full_state, self.device_mesh, offload_policy)
            return model
        raise ValueError(f"model.strategy must be fsdp or fsdp2, got {strategy!r}")

    def _lr_scheduler(self):
        """verl's schedules over all epochs; trainer.total_training_steps only stops early, as in verl's SFT."""
        name = self.config.optim.get("lr_scheduler", "cosine")
        if name not in LR_SCHEDULES:
            raise ValueError(f"optim.lr_scheduler must be one of {sorted(LR_SCHEDULES)}, got {name!r}")
        warmup_steps = int(self.total_steps * self.config.optim.lr_warmup_steps_ratio)
        return LR_SCHEDULES[name](
            optimizer=self.optimizer, num_warmup_steps=warmup_steps, num_training_steps=self.total_steps
        )

    # forward, loss, step
    def _pair_forwards(self, batch: TensorDict):
        data = self.config.data
        return pair_forwards(self.fsdp_model, batch, self.bt, data.micro_batch_size_per_gpu, data.max_length)

    def _sum_over_ranks(self, totals: torch.Tensor) -> torch.Tensor:
        totals = totals.to(get_device_id())
        dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        return totals.cpu()

    def _clip_grad_norm(self) -> torch.Tensor:
        max_norm = self.config.optim.clip_grad
        if self.config.model.strategy == "fsdp":
            norm = self.fsdp_model.clip_grad_norm_(max_norm=max_norm)
        else:
            norm = fsdp2_clip_grad_norm_(self.fsdp_model.parameters(), max_norm=max_norm)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    def training_step(self, batch: TensorDict):
        start = time.time()
        self._val_totals = None
        self.fsdp_model.train()
        self.optimizer.zero_grad()
        pairs = batch.batch_size[0]
        step_totals = []
        for rewards, margins, counts in self._pair_forwards(batch):
            losses = bradley_terry_losses(rewards, margins, self.bt.margin_mode)
            (losses.sum() / pairs).backward()  # the step's gradient is that of the mean loss over its pairs
            step_totals.append(pair_totals(losses, rewards, counts))
        grad_norm = self._clip_grad_norm()
        if torch.isfinite(grad_norm):
            self.optimizer.step()
        else:
            print(f"WARN: grad_norm is not finite ({grad_norm.item()}); the update is skipped")
            self.optimizer.zero_grad()
        self.lr_scheduler.step()
        totals = self._sum_over_ranks(torch.stack(step_totals).sum(0))
        return {
            **pair_metrics(totals, "train"),
            "train/padding_share": padding_share(totals),
            **token_counts(totals, "train"),
            "train/grad_norm": grad_norm.item(),
            "train/lr": self.lr_scheduler.get_last_lr()[0],
            "train/time(s)": time.time() - start,
        }

    def validation_step(self, batch: TensorDict):
        self.fsdp_model.eval()
        with torch.no_grad():
            totals = [
                pair_totals(bradley_terry_losses(rewards, margins, self.bt.margin_mode), rewards, counts)
                for rewards, margins, counts in self._pair_forwards(batch)
            ]
        totals = self._sum_over_ranks(torch.stack(totals).sum(0))
        self._val_totals = totals if self._val_totals is None else self._val_totals + totals
        return totals[TOTALS.index("loss")] / totals[TOTALS.index("pairs")]

    def fit(self):
        with _validation_metrics_in_tracking(self):
            super().fit()

    def pop_validation_metrics(self) -> dict[str, float]:
        """val/loss, val/accuracy and val/reward_gap over every validation pair of the last validation."""
        metrics = pair_metrics(self._val_totals, "val")
        self._val_totals = None
        return metrics


def _require_pairs(dataset: PairDataset, needed: int, unit: str) -> None:
    if len(dataset) < needed:
        raise PairDataError(f"{', '.join(dataset.files)}: {len(dataset)} pairs, fewer than {unit}: {needed}")


@contextmanager
def _validation_metrics_in_tracking(trainer: BradleyTerryTrainer):
    """verl's fit() logs only val/loss after a validation (the mean of validation_step's returns). While it
    runs, its Tracking class is one that completes that record with the trainer's pair metrics (the same
    val/loss, plus val/accuracy and val/reward_gap); fit() keeps the record, so its final print has them too."""
    base_tracking = fsdp_sft_trainer.Tracking

    class PairMetricsTracking(base_tracking):
        def log(self, data, step, backend=None):
            if "val/loss" in data:
                data.update(trainer.pop_validation_metrics())
            super().log(data=data, step=step, backend=backend)

    fsdp_sft_trainer.Tracking = PairMetricsTracking
    try:
        yield
    finally:
        fsdp_sft_trainer.Tracking = base_tracking


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


def run_bt(config) -> None:
    # The data is read and checked before any process group exists, so a bad row fails fast on every rank.
    tokenizer = hf_tokenizer(
        copy_to_local(config.model.partial_pretrain), trust_remote_code=config.model.trust_remote_code
    )
    train_dataset, val_dataset = load_pair_datasets(config, tokenizer)
    device_name = get_device_name()
    _, rank, world_size = initialize_global_process_group()
    if rank == 0:
        print(f"train: {train_dataset.describe()}\nval: {val_dataset.describe()}")
    device_mesh = init_device_mesh(device_type=device_name, mesh_shape=(world_size,), mesh_dim_names=("fsdp",))
    ulysses_device_mesh = init_device_mesh(
        device_type=device_name, mesh_shape=(world_size, 1), mesh_dim_names=("dp", "sp")
    )
    torch.manual_seed(config.trainer.seed)  # the new scoring head's initial weights (rank 0's are broadcast)
    trainer = BradleyTerryTrainer(config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset)
    trainer.fit()
    destroy_global_process_group()


@hydra.main(config_path="configs", config_name="bradley_terry", version_base=None)
def main(config) -> None:
    """The trainer's entry point; the launcher starts it on its resolved config snapshot, a direct run on
    configs/bradley_terry.yaml (whose interpolations need the launcher's resolvers)."""
    register_resolvers()
    try:
        run_bt(config)
    except PairDataError as err:
        raise SystemExit(f"[rank {os.environ.get('RANK', 0)}] bt_trainer: {err}") from err


if __name__ == "__main__":
    main()
