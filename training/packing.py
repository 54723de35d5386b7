"""Packed Bradley-Terry forwards: a pair is a group of two judge inputs sharing their prompt, packed by the
scalar judge's own packing (judge_models/packing.py) as [prompt, chosen response, rejected response], so
each pair's prompt is computed once, with no padding, and every reward is the unpacked sequence's."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from judge_models.packing import PackedRow, pack_groups, packed_outputs, shared_prefix_length

Pair = tuple[Sequence[int], Sequence[int]]


def shared_prompt_length(chosen: Sequence[int], rejected: Sequence[int]) -> int:
    """Tokens both sides start with, leaving each at least its last token as its own response."""
    return shared_prefix_length([chosen, rejected])


def useful_tokens(chosen: Sequence[int], rejected: Sequence[int]) -> int:
    """The tokens a pair needs computed: its prompt once and both responses."""
    return len(chosen) + len(rejected) - shared_prompt_length(chosen, rejected)


def pack_pairs(pairs: Sequence[Pair], max_tokens: int, device=None) -> list[PackedRow]:
    """(chosen ids, rejected ids) pairs as packed rows of at most `max_tokens` tokens each; a row's `groups`
    are the indices of its pairs."""
    return pack_groups([list(pair) for pair in pairs], max_tokens, device)


def packed_rewards(model, row: PackedRow) -> torch.Tensor:
    """The fp32 rewards (pairs, 2) of a packed row of pairs, differentiable; the model must use packed attention."""
    return packed_outputs(model, row)[:, 0].view(-1, 2)
