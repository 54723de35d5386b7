"""Batches for padded forward passes: texts of similar length together, so that padding stays small."""

from __future__ import annotations

from collections.abc import Sequence


def length_groups(
    lengths: Sequence[int], max_padding_fraction: float, max_group_size: int | None = None
) -> list[list[int]]:
    """Indices of `lengths` grouped for padded forward passes: sorted by length, and a new group starts
    where padding to the group's longest text would exceed `max_padding_fraction` of the group's tokens,
    or where the group already holds `max_group_size` texts (None: no limit)."""
    groups: list[list[int]] = []
    real_tokens = 0
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        length = lengths[index]
        if groups and (max_group_size is None or len(groups[-1]) < max_group_size):
            padded = length * (len(groups[-1]) + 1)
            if not padded or (padded - real_tokens - length) / padded <= max_padding_fraction:
                groups[-1].append(index)
                real_tokens += length
                continue
        groups.append([index])
        real_tokens = length
    return groups
