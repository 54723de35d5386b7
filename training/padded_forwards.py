"""Exact shortcuts for verl's padded forwards, where padding is not removed (CPU mode: no flash-attn).

Without padding removal, verl 0.6.1 runs every column of a padded batch through the model and its
language-model head (49k outputs a position for SmolLM2), then keeps the response tokens alone. These cuts
give the same losses, log-probabilities, gradients and generations for less work:
- SFT: a micro batch is cut after its last trained token, and the head runs from its first trained
  position only (`sft_micro_batch_loss`);
- the actor and reference forwards: the left-padding columns no row uses are dropped
  (`without_unused_left_padding`), and the head runs on the response positions only (`head_on_last`);
- the HF rollout generates without those columns too (training/hf_rollout.py, `unused_left_padding`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

INPUT_KEYS = ("input_ids", "attention_mask", "position_ids")


def trained_span(trained: torch.Tensor) -> tuple[int, int]:
    """First and last column in which some row has a trained target ((0, 0) when none has)."""
    columns = trained.any(dim=0).nonzero().flatten()
    if len(columns) == 0:
        return 0, 0
    return int(columns[0]), int(columns[-1])


def sft_micro_batch_loss(trainer, batch, do_backward: bool = True, n_micro_batches: int = 1) -> torch.Tensor:
    """verl's SFT micro-batch loss without sequence parallelism (FSDPSFTTrainer._compute_loss_and_backward),
    computed only over the span of positions whose next token is trained on. `batch` is right-padded."""
    device = trainer.device_name
    trained = batch.pop("loss_mask")[:, 1:].to(device)  # trained[:, t]: the token at t + 1 is a target
    first, last = trained_span(trained)
    inputs = {key: batch[key][:, : last + 1].to(device) for key in INPUT_KEYS}
    targets = batch["input_ids"][:, first + 1 : last + 2].to(device)
    trained = trained[:, first : last + 1]
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = trainer.fsdp_model(**inputs, use_cache=False, logits_to_keep=last + 1 - first).logits
        losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none") * trained.flatten()
        valid_tokens = trained.sum()
        ranks = 1
        if trainer.config.data.balance_dp_token:
            torch.distributed.all_reduce(valid_tokens)
            ranks = torch.distributed.get_world_size()
        loss = losses.sum() / (valid_tokens + 1e-8) * ranks / n_micro_batches
        if do_backward:
            loss.backward()
        return loss


def unused_left_padding(attention_mask: torch.Tensor) -> int:
    """How many leading columns of a left-padded batch are padding in every row."""
    return int(attention_mask.any(dim=0).int().argmax())


def without_unused_left_padding(micro_batch: dict) -> dict:
    """A left-padded micro batch without the leading columns that are padding in every row."""
    start = unused_left_padding(micro_batch["attention_mask"])
    if start == 0:
        return micro_batch
    return {**micro_batch, **{key: micro_batch[key][..., start:] for key in INPUT_KEYS}}


@contextmanager
def head_on_last(module: torch.nn.Module, positions: int) -> Iterator[None]:
    """Inside the block, a forward of `module` (a causal LM, FSDP-wrapped or not) computes its language-model
    head on the last `positions` positions only."""

    def keep_last(_module, args, kwargs):
        return args, {**kwargs, "logits_to_keep": positions}

    handle = module.register_forward_pre_hook(keep_last, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
