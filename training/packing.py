"""Packed Bradley-Terry forwards: each pair's shared prompt computed once, no padding.

The chosen and rejected sequences of a pair share their prompt (the longest common prefix of their token
ids, which the chat template makes end inside or after the assistant header). A pair is packed as
[prompt, chosen response, rejected response], and several pairs share a row of at most `max_tokens`:

- positions: the prompt 0..P-1, each response P..P+R-1, as in its own unpacked sequence;
- attention: a prompt token sees the earlier tokens of its prompt; a response token sees its whole prompt
  and the earlier tokens of its own response, never the other response nor another pair;
- reward: the scoring head's output at the last token of each response.

So every reward is the one the model gives the unpacked sequence, while the prompt and the padding are never
computed twice or at all. The attention runs per segment (each query segment with only the keys it may see),
which skips the masked blocks a dense mask would still compute: PyTorch SDPA per segment, or on CUDA with
flash-attn one varlen call for the whole row (untested here: no GPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv
from transformers.utils import is_flash_attn_2_available

from serving.judges.scalar_model import token_rewards

PACKED_ATTENTION = "bt_packed_pairs"  # the attention implementation name a packing model is switched to
LAYOUT_KWARG = "packed_layout"  # the forward keyword that carries a row's RowLayout to every attention layer


def shared_prompt_length(chosen: Sequence[int], rejected: Sequence[int]) -> int:
    """Tokens both sequences start with, leaving each at least its last token as its own response (where its
    reward is read): a pair whose sides are identical, or one a prefix of the other, still packs."""
    limit = min(len(chosen), len(rejected)) - 1
    length = 0
    while length < limit and chosen[length] == rejected[length]:
        length += 1
    return length


def useful_tokens(chosen: Sequence[int], rejected: Sequence[int]) -> int:
    """The tokens a pair needs computed: its prompt once and both responses."""
    return len(chosen) + len(rejected) - shared_prompt_length(chosen, rejected)


@dataclass(frozen=True)
class Segment:
    """A run of query tokens [start, end) of a row that attends to the whole of its prompt [prompt_start,
    prompt_end) (empty for a prompt itself) and causally to itself."""

    start: int
    end: int
    prompt_start: int
    prompt_end: int

    @property
    def keys(self) -> int:
        return self.prompt_end - self.prompt_start + self.end - self.start


@dataclass(frozen=True)
class RowLayout:
    """Where a packed row's segments lie; what the attention layers read."""

    segments: tuple[Segment, ...]
    tokens: int

    def key_index(self, device) -> torch.Tensor:
        """Per segment, the row positions of its keys (prompt, then itself), concatenated: varlen's K/V gather."""
        ranges = [
            torch.cat([torch.arange(s.prompt_start, s.prompt_end), torch.arange(s.start, s.end)]) for s in self.segments
        ]
        return torch.cat(ranges).to(device)


@dataclass(frozen=True)
class PackedRow:
    """One forward: input_ids and position_ids (1, tokens), the layout, the (pairs, 2) positions of the
    chosen / rejected reward tokens, and which pairs of the packed list these are."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    layout: RowLayout
    reward_positions: torch.Tensor
    pairs: list[int]

    @property
    def tokens(self) -> int:
        return self.layout.tokens


def rows_by_token_budget(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices of items with these packed lengths, in rows of at most `max_tokens` (first fit, longest first);
    an item longer than the budget gets a row of its own."""
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, free in enumerate(room) if lengths[index] <= free), None)
        if row is None:
            rows.append([])
            room.append(max_tokens)
            row = len(rows) - 1
        rows[row].append(index)
        room[row] -= lengths[index]
    return rows


def pack_row(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], indices: list[int], device=None) -> PackedRow:
    ids, positions, segments, rewards = [], [], [], []
    for index in indices:
        chosen, rejected = pairs[index]
        prompt = shared_prompt_length(chosen, rejected)
        start = len(ids)
        ids += chosen[:prompt]
        positions += range(prompt)
        segments.append(Segment(start, start + prompt, start, start))
        ends = []
        for sequence in (chosen, rejected):
            response_start = len(ids)
            ids += sequence[prompt:]
            positions += range(prompt, len(sequence))
            segments.append(Segment(response_start, len(ids), start, start + prompt))
            ends.append(len(ids) - 1)
        rewards.append(ends)
    return PackedRow(
        input_ids=torch.tensor([ids], dtype=torch.long, device=device),
        position_ids=torch.tensor([positions], dtype=torch.long, device=device),
        layout=RowLayout(tuple(s for s in segments if s.end > s.start), len(ids)),
        reward_positions=torch.tensor(rewards, dtype=torch.long, device=device),
        pairs=list(indices),
    )


def pack_pairs(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], max_tokens: int, device=None) -> list[PackedRow]:
    """(chosen ids, rejected ids) pairs as packed rows of at most `max_tokens` tokens each."""
    lengths = [useful_tokens(chosen, rejected) for chosen, rejected in pairs]
    return [pack_row(pairs, indices, device) for indices in rows_by_token_budget(lengths, max_tokens)]


def packed_rewards(model, row: PackedRow) -> torch.Tensor:
    """The fp32 rewards (pairs, 2) of a packed row, differentiable; the model must use packed attention."""
    if model.config._attn_implementation != PACKED_ATTENTION:
        raise ValueError(
            f"the model must use packed attention (use_packed_attention), not {model.config._attn_implementation!r}"
        )
    return token_rewards(
        model,
        row.reward_positions.flatten(),
        input_ids=row.input_ids,
        position_ids=row.position_ids,
        **{LAYOUT_KWARG: row.layout},
    ).view(-1, 2)


# --- attention ---------------------------------------------------------------------------------------


def use_packed_attention(model) -> None:
    """Switches a model's attention to the packed one: every forward must then pass a RowLayout. transformers
    builds no mask for an attention implementation it does not know, so none is computed."""
    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    model.config._attn_implementation = PACKED_ATTENTION


def packed_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention-function contract: query (1, heads, tokens, dim), key / value (1, kv heads,
    tokens, dim); returns (1, tokens, heads, dim)."""
    layout = kwargs.get(LAYOUT_KWARG)
    if layout is None:
        raise ValueError(f"packed attention needs the row layout: pass {LAYOUT_KWARG}= to the model's forward")
    if query.shape[0] != 1 or dropout:
        raise ValueError("packed attention takes one row per forward and no attention dropout")
    if query.is_cuda and is_flash_attn_2_available():
        return flash_varlen_attention(query, key, value, layout, scaling), None
    return segment_sdpa_attention(module, query, key, value, layout, scaling), None


def segment_sdpa_attention(module, query, key, value, layout: RowLayout, scaling) -> torch.Tensor:
    """SDPA per segment, each with only the keys it may see: a prompt causally over itself; a response over
    its prompt and causally over itself (the causal diagonal aligned to the last key)."""
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    outputs = []
    for segment in layout.segments:
        queries = query[:, :, segment.start : segment.end]
        span = slice(segment.start, segment.end)
        if segment.prompt_start == segment.prompt_end:
            out = F.scaled_dot_product_attention(
                queries, key[:, :, span], value[:, :, span], is_causal=True, scale=scaling
            )
        else:
            prompt = slice(segment.prompt_start, segment.prompt_end)
            keys = torch.cat([key[:, :, prompt], key[:, :, span]], dim=2)
            values = torch.cat([value[:, :, prompt], value[:, :, span]], dim=2)
            prompt_length = segment.prompt_end - segment.prompt_start
            mask = torch.ones(queries.shape[2], segment.keys, dtype=torch.bool, device=query.device).tril(prompt_length)
            out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=scaling)
        outputs.append(out)
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous()


def flash_varlen_attention(query, key, value, layout: RowLayout, scaling) -> torch.Tensor:
    """flash-attn's varlen kernel over the row: query segments are contiguous; each one's keys (its prompt and
    itself) are gathered, and flash-attn's causal mask aligns to the last key, as a response needs."""
    from flash_attn import flash_attn_varlen_func

    device = query.device
    key_index = layout.key_index(device)
    query_lengths = [s.end - s.start for s in layout.segments]
    key_lengths = [s.keys for s in layout.segments]
    cu_query, cu_key = (
        F.pad(torch.tensor(lengths, device=device).cumsum(0), (1, 0)).to(torch.int32)
        for lengths in (query_lengths, key_lengths)
    )
    out = flash_attn_varlen_func(
        query[0].transpose(0, 1),
        key[0].transpose(0, 1)[key_index],
        value[0].transpose(0, 1)[key_index],
        cu_query,
        cu_key,
        max(query_lengths),
        max(key_lengths),
        softmax_scale=scaling,
        causal=True,
    )
    return out.unsqueeze(0)
