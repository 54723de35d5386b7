"""The reward of a scalar (Bradley-Terry) judge: the output of a one-label sequence-classification model at
the last token that is not the pad token (the model finds it through its config's pad_token_id). A
multi-attribute judge has one output per attribute at that token (`padded_outputs`, `sequence_outputs`).

One implementation for the three places that read it: the Bradley-Terry trainer's forward pass, the
export's calibration (the judge's reward_center / reward_scale) and the scalar judge of the server, so that
the same tokens get the same reward in all three. Sequences are right-padded: the reward token then keeps
the position it has in the unpadded sequence. The trainer's packed forwards (training/packing.py) read the
same head at chosen tokens of one packed row instead (token_rewards).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .base import length_groups


def right_padded(sequences: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and padding mask (1 for a token, 0 for padding), both (len(sequences), longest sequence)."""
    length = max(len(ids) for ids in sequences)
    input_ids = torch.full((len(sequences), length), pad_token_id, dtype=torch.long)
    padding_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(sequences):
        input_ids[row, : len(ids)] = torch.as_tensor(ids)
        padding_mask[row, : len(ids)] = 1
    return input_ids, padding_mask


def right_padded_causal_mask(padding_mask: torch.Tensor) -> torch.Tensor:
    """The (batch, 1, length, length) boolean mask of a right-padded batch: causal, and no padded keys.
    Given such a 4D mask, transformers' SDPA attention uses it as it is; from the 2D padding mask it would
    build the same one through torch.vmap, which costs tens of milliseconds per forward on this stack
    (torch 2.13's pytree flattening), more than a small judge's whole forward pass."""
    length = padding_mask.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=padding_mask.device).tril()
    return causal[None, None] & padding_mask.bool()[:, None, None, :]


def padded_outputs(model, input_ids: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """The fp32 outputs (batch, num_labels) of a right-padded batch, differentiable (the trainers backpropagate
    them). Only SDPA attention takes the boolean 4D mask: flash_attention_2 accepts nothing but the 2D mask,
    and eager attention would add a boolean mask to its scores instead of masking them."""
    sdpa = model.config._attn_implementation == "sdpa"
    attention_mask = right_padded_causal_mask(padding_mask) if sdpa else padding_mask
    return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits.float()


def padded_rewards(model, input_ids: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """The fp32 rewards (batch,) of a right-padded batch: the first output of each sequence."""
    return padded_outputs(model, input_ids, padding_mask)[:, 0]


def scoring_head(model) -> torch.nn.Module:
    """The one-label head (`score`) of a sequence-classification model, also inside an FSDP1 wrapper."""
    head = getattr(getattr(model, "module", model), "score", None)
    if not isinstance(head, torch.nn.Module):
        raise ValueError(f"{type(model).__name__} has no `score` head: not a sequence-classification model")
    return head


def token_rewards(model, positions: torch.Tensor, **inputs) -> torch.Tensor:
    """The fp32 rewards read at token `positions` of a one-row forward (batch 1), differentiable. The model's
    own output is pooled at the last non-pad token; the head's output at every position is taken instead,
    as it leaves the head inside the model's forward (which a wrapper such as FSDP must run itself)."""
    scores = []
    handle = scoring_head(model).register_forward_hook(lambda module, args, output: scores.append(output))
    try:
        pooled = model(**inputs, use_cache=False).logits
    finally:
        handle.remove()
    # FSDP starts its backward (unsharding, gradient reduction) from hooks on the forward's outputs, so the
    # rewards must reach back through one: the pooled output joins them with weight zero.
    return scores[0][0, positions, 0].float() + 0.0 * pooled.sum()


def sequence_outputs(
    model,
    sequences: Sequence[Sequence[int]],
    pad_token_id: int,
    max_padding_fraction: float,
    max_batch_size: int | None = None,
) -> list[list[float]]:
    """The outputs (num_labels each) of token sequences, in their order, without gradients: forward passes
    over groups of similar lengths (at most `max_padding_fraction` padding and `max_batch_size` sequences
    each, see length_groups), right-padded, on the model's device. Each sequence must end with a token other
    than the pad token; the callers check it, each with its own kind of error."""
    outputs: list[list[float]] = [[] for _ in sequences]
    for group in length_groups([len(ids) for ids in sequences], max_padding_fraction, max_batch_size):
        input_ids, padding_mask = right_padded([sequences[index] for index in group], pad_token_id)
        with torch.inference_mode():
            group_outputs = padded_outputs(model, input_ids.to(model.device), padding_mask.to(model.device))
        for index, row in zip(group, group_outputs.tolist(), strict=True):
            outputs[index] = row
    return outputs


def sequence_rewards(
    model,
    sequences: Sequence[Sequence[int]],
    pad_token_id: int,
    max_padding_fraction: float,
    max_batch_size: int | None = None,
) -> list[float]:
    """The rewards (first outputs) of token sequences, in their order, as `sequence_outputs` computes them."""
    return [row[0] for row in sequence_outputs(model, sequences, pad_token_id, max_padding_fraction, max_batch_size)]
