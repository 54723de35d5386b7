"""The trainer base of scalar-head judges on verl's FSDP SFT trainer, shared by Bradley-Terry
(training/bt_trainer.py) and attribute regression (training/attribute_trainer.py).

`ScalarHeadTrainer` subclasses verl 0.6.1's `FSDPSFTTrainer` and keeps its config, device mesh, sampler,
StatefulDataLoader, checkpoint manager (resume included), tracking and `fit()`, and builds the model with
verl's FSDP / FSDP2 wrapping helpers, `build_optimizer` and LR schedules. What it adds for any scalar head:

- model: `AutoModelForSequenceClassification` whose outputs are read at the last token that is not the pad
  token, as the judge server reads them; the export writes the same class and weight names.
- data: conversations tokenized through the chat template exactly as the judge server does, each sequence
  fitted to data.max_length (truncated or refused, and counted); every row checked before training starts.
- steps: a subclass yields, per forward over a batch, the per-row losses and the sums its metrics are ratios
  of; the base backpropagates the mean loss over the batch's rows, steps the optimizer and sums the metrics'
  sums over all ranks on every device (verl's SFT trainer reduces its loss on GPUs only), so every metric is
  exact on any world size. Validation metrics are those sums over the whole validation set.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed as dist
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

from judge_core.protocol import templates
from training import cpu_compat
from training.launch.config import register_resolvers

TRUNCATIONS = ("left", "right", "error")
LR_SCHEDULES = {"cosine": get_cosine_schedule_with_warmup, "wsd": get_wsd_schedule_with_warmup}


class TrainingDataError(ValueError):
    """A data file that cannot be trained on; the message names the file, the row and the field."""


@dataclass(frozen=True)
class SequenceLimits:
    """How long a tokenized conversation may be."""

    max_length: int  # tokens per sequence
    truncation: str  # left | right | error, for sequences longer than max_length

    def __post_init__(self):
        if self.truncation not in TRUNCATIONS:
            raise ValueError(f"data.truncation must be one of {TRUNCATIONS}, got {self.truncation!r}")
        if self.max_length < 2:
            raise ValueError(f"data.max_length must be at least 2, got {self.max_length}")


# --- data --------------------------------------------------------------------------------------------


def parse_conversation(value, where: str, error: type[TrainingDataError]) -> list[dict]:
    """A conversation cell (a JSON string of messages ending with the assistant's response)."""
    if not isinstance(value, str):
        raise error(f"{where}: expected a JSON string of messages, got {type(value).__name__}")
    try:
        messages = json.loads(value)
    except json.JSONDecodeError as err:
        raise error(f"{where}: not valid JSON ({err.msg} at character {err.pos})") from err
    if not isinstance(messages, list) or not messages:
        raise error(f"{where}: expected a non-empty JSON list of messages")
    try:
        messages = templates.as_messages(messages)
    except (TypeError, ValueError) as err:
        raise error(f"{where}: {err}") from err
    if messages[-1]["role"] != "assistant":
        raise error(f"{where}: the last message must be the assistant's response, not {messages[-1]['role']!r}")
    return messages


def read_columns(path: str, columns: Sequence[str], error: type[TrainingDataError]) -> list[dict]:
    """The rows of a parquet file restricted to `columns`, every one of which it must have."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise error(f"{path}: cannot read it as parquet: {err}") from err
    missing = [name for name in columns if name not in table.column_names]
    if missing:
        raise error(f"{path}: missing column(s) {missing}; it has {table.column_names}")
    return table.select(list(columns)).to_pylist()


class TokenizedConversations(Dataset):
    """The items of one or more parquet files, their conversations tokenized up front as int32 tensors (a
    Python list of ints would take seven times the memory on every rank). A subclass reads a file's rows into
    items (`_read_file`) and names its sequences (`_sequences`)."""

    error: type[TrainingDataError] = TrainingDataError
    unit: str = "rows"  # what an item is, in messages

    def __init__(self, files: str | Sequence[str], tokenizer, config: SequenceLimits):
        if tokenizer.pad_token_id is None:
            raise self.error("the tokenizer has no pad token; set one that differs from the content tokens")
        self.config = config
        self.pad_token_id = tokenizer.pad_token_id
        self.files = [files] if isinstance(files, str) else [str(f) for f in files]
        self.items: list[tuple] = []
        self.truncated: list[str] = []  # where each truncated sequence comes from
        for path in self.files:
            self.items.extend(self._read_file(path, tokenizer))
        if not self.items:
            raise self.error(f"{', '.join(self.files)}: no {self.unit}")

    def _read_file(self, path: str, tokenizer) -> list[tuple]:
        raise NotImplementedError

    def _sequences(self, item: tuple) -> Sequence[torch.Tensor]:
        raise NotImplementedError

    def _fit(self, ids: list[int], where: str) -> torch.Tensor:
        """`ids` within max_length (per the truncation rule), checked to end with a token the outputs can be
        read at: the model reads them at the last token that is not the pad token."""
        limit = self.config.max_length
        if len(ids) > limit:
            if self.config.truncation == "error":
                raise self.error(f"{where}: {len(ids)} tokens, more than max_length {limit} (truncation=error)")
            self.truncated.append(where)
            ids = ids[-limit:] if self.config.truncation == "left" else ids[:limit]
        if not ids or ids[-1] == self.pad_token_id:
            raise self.error(
                f"{where}: the sequence is empty or ends with the pad token (id {self.pad_token_id}); "
                "the reward is read at the last non-pad token, so the pad token must differ from it"
            )
        return torch.tensor(ids, dtype=torch.int32)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        return self.items[index]

    def require(self, needed: int, what: str) -> None:
        if len(self) < needed:
            raise self.error(f"{', '.join(self.files)}: {len(self)} {self.unit}, fewer than {what}: {needed}")

    def describe(self) -> str:
        lengths = sorted(len(ids) for item in self.items for ids in self._sequences(item))
        text = (
            f"{', '.join(self.files)}: {len(self)} {self.unit}, sequence length median {lengths[len(lengths) // 2]}, "
            f"max {lengths[-1]}; {len(self.truncated)} sequences longer than max_length {self.config.max_length}"
        )
        if self.truncated:
            text += f" truncated ({self.config.truncation}), e.g. {'; '.join(self.truncated[:3])}"
        return text


def length_sorted_micro_batches(batch: TensorDict, size: int) -> list[TensorDict]:
    """The batch's items, longest first, split into micro-batches of `size` items: similar lengths share a
    micro-batch, so cutting each to its own longest sequence leaves little padding. The attention mask may
    hold several sequences per item (a pair's two); an item's length is its longest."""
    lengths = batch["attention_mask"].sum(-1)
    lengths = lengths.flatten(1).amax(-1) if lengths.dim() > 1 else lengths
    order = torch.argsort(lengths, descending=True, stable=True)
    return list(batch[order].split(size))


# --- model -------------------------------------------------------------------------------------------


def compute_dtype(device_name: str) -> torch.dtype:
    """bf16 on accelerators; on CPU the dtype of CPU mode (JUDGE_CPU_DTYPE, fp32 unless asked otherwise)."""
    if device_name == "cpu" and cpu_compat.cpu_dtype() == "fp32":
        return torch.float32
    return torch.bfloat16


def attention_implementation() -> str:
    return "flash_attention_2" if is_flash_attn_2_available() else "sdpa"


def check_supported(config, trainer_name: str) -> None:
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
        raise ValueError(f"not supported by the {trainer_name} trainer: " + "; ".join(refused))


# (losses of the forward's rows, the sums of its metrics): what a subclass's forwards yield
Forward = tuple[torch.Tensor, torch.Tensor]


class ScalarHeadTrainer(fsdp_sft_trainer.FSDPSFTTrainer):
    """A subclass names itself (`trainer_name`), gives the collator of its dataset's items, the model's labels,
    its forwards and its metrics."""

    trainer_name: str

    def __init__(self, config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset):
        check_supported(config, self.trainer_name)
        self._val_totals: torch.Tensor | None = None
        super().__init__(config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset)

    # what a subclass defines
    def _collator(self) -> Callable[[list], dict[str, torch.Tensor]]:
        raise NotImplementedError

    def _set_labels(self, model_config) -> None:
        """The model config's labels (num_labels, and their names where they mean something)."""
        raise NotImplementedError

    def _configure_model(self, model) -> None:
        """Changes to the loaded model before it is sharded."""

    def _describe(self) -> str:
        """The loss and forwards, for the start-up line."""
        raise NotImplementedError

    def _forwards(self, batch: TensorDict) -> Iterator[Forward]:
        raise NotImplementedError

    def _train_metrics(self, totals: torch.Tensor) -> dict[str, float]:
        raise NotImplementedError

    def _validation_metrics(self, totals: torch.Tensor) -> dict[str, float]:
        """val/loss and the rest, from the sums over the validation set."""
        raise NotImplementedError

    def _is_rank_zero(self) -> bool:
        return self.device_mesh.get_rank() == 0

    # data: verl's sampler and StatefulDataLoader, with the subclass's collator. The items are tokenized up
    # front, so loading a batch costs nothing and needs no worker processes.
    def _build_dataloader(self, train_dataset, val_dataset):
        self.train_dataset, self.val_dataset = train_dataset, val_dataset
        world_size = self.device_mesh.size()
        data = self.config.data
        train_dataset.require(world_size * data.train_batch_size, "one global batch (data.train_batch_size)")
        val_dataset.require(
            world_size * data.micro_batch_size_per_gpu,
            "one micro-batch per rank (ranks x data.micro_batch_size_per_gpu)",
        )
        self.train_sampler, self.train_dataloader = self._loader(train_dataset, data.train_batch_size, shuffle=True)
        self.val_sampler, self.val_dataloader = self._loader(val_dataset, data.micro_batch_size_per_gpu, shuffle=False)
        if self._is_rank_zero():
            used = len(self.val_dataloader) * world_size * data.micro_batch_size_per_gpu
            unit = val_dataset.unit
            print(f"validation uses {used} of {len(val_dataset)} {unit} (whole micro-batches on every rank)")

    def _loader(self, dataset, batch_size: int, shuffle: bool) -> tuple[DistributedSampler, StatefulDataLoader]:
        """This rank's sampler and loader of `dataset` in whole collated batches."""
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
            collate_fn=self._collator(),
            num_workers=0,
            pin_memory=get_device_name() != "cpu",
            drop_last=True,
        )
        return sampler, loader

    # model: a sequence-classification head, wrapped with verl's FSDP / FSDP2 helpers
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
                f"compute dtype {compute_dtype(get_device_name())}, {self._describe()}"
            )

    def _load_scoring_model(self):
        model_settings = self.config.model
        local_path = copy_to_local(model_settings.partial_pretrain, verbose=self._is_rank_zero())
        model_config = AutoConfig.from_pretrained(local_path, trust_remote_code=model_settings.trust_remote_code)
        self._set_labels(model_config)
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
        self._configure_model(model)
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

    # step
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
        rows = batch.batch_size[0]
        step_totals = []
        for losses, totals in self._forwards(batch):
            (losses.sum() / rows).backward()  # the step's gradient is that of the mean loss over its rows
            step_totals.append(totals)
        grad_norm = self._clip_grad_norm()
        if torch.isfinite(grad_norm):
            self.optimizer.step()
        else:
            print(f"WARN: grad_norm is not finite ({grad_norm.item()}); the update is skipped")
            self.optimizer.zero_grad()
        self.lr_scheduler.step()
        totals = self._sum_over_ranks(torch.stack(step_totals).sum(0))
        return {
            **self._train_metrics(totals),
            "train/grad_norm": grad_norm.item(),
            "train/lr": self.lr_scheduler.get_last_lr()[0],
            "train/time(s)": time.time() - start,
        }

    def validation_step(self, batch: TensorDict):
        self.fsdp_model.eval()
        with torch.no_grad():
            totals = [forward_totals for _, forward_totals in self._forwards(batch)]
        totals = self._sum_over_ranks(torch.stack(totals).sum(0))
        self._val_totals = totals if self._val_totals is None else self._val_totals + totals
        return torch.tensor(self._validation_metrics(totals)["val/loss"], dtype=torch.float64)

    def fit(self):
        with _validation_metrics_in_tracking(self):
            super().fit()

    def pop_validation_metrics(self) -> dict[str, float]:
        """The validation metrics over every validation row of the last validation."""
        metrics = self._validation_metrics(self._val_totals)
        self._val_totals = None
        return metrics


@contextmanager
def _validation_metrics_in_tracking(trainer: ScalarHeadTrainer):
    """verl's fit() logs only val/loss after a validation (the mean of validation_step's returns). While it
    runs, its Tracking class is one that completes that record with the trainer's validation metrics (the
    same val/loss, exact over the whole set, and the rest); fit() keeps the record, so its final print has
    them too."""
    base_tracking = fsdp_sft_trainer.Tracking

    class ValidationMetricsTracking(base_tracking):
        def log(self, data, step, backend=None):
            if "val/loss" in data:
                data.update(trainer.pop_validation_metrics())
            super().log(data=data, step=step, backend=backend)

    fsdp_sft_trainer.Tracking = ValidationMetricsTracking
    try:
        yield
    finally:
        fsdp_sft_trainer.Tracking = base_tracking


# --- entry point -------------------------------------------------------------------------------------

# (config, tokenizer) -> (train dataset, validation dataset)
DatasetLoader = Callable[..., tuple[TokenizedConversations, TokenizedConversations]]


def run_training(config, load_datasets: DatasetLoader, trainer_class: type[ScalarHeadTrainer]) -> None:
    # The data is read and checked before any process group exists, so a bad row fails fast on every rank.
    tokenizer = hf_tokenizer(
        copy_to_local(config.model.partial_pretrain), trust_remote_code=config.model.trust_remote_code
    )
    train_dataset, val_dataset = load_datasets(config, tokenizer)
    device_name = get_device_name()
    _, rank, world_size = initialize_global_process_group()
    if rank == 0:
        print(f"train: {train_dataset.describe()}\nval: {val_dataset.describe()}")
    device_mesh = init_device_mesh(device_type=device_name, mesh_shape=(world_size,), mesh_dim_names=("fsdp",))
    ulysses_device_mesh = init_device_mesh(
        device_type=device_name, mesh_shape=(world_size, 1), mesh_dim_names=("dp", "sp")
    )
    torch.manual_seed(config.trainer.seed)  # the new scoring head's initial weights (rank 0's are broadcast)
    trainer = trainer_class(config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset)
    trainer.fit()
    destroy_global_process_group()


def run_main(config, load_datasets: DatasetLoader, trainer_class: type[ScalarHeadTrainer], program: str) -> None:
    """A trainer module's entry point on its resolved config: a data error ends the run with its message."""
    register_resolvers()
    try:
        run_training(config, load_datasets, trainer_class)
    except TrainingDataError as err:
        raise SystemExit(f"[rank {os.environ.get('RANK', 0)}] {program}: {err}") from err
