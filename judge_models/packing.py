"""Packed forwards of a scalar judge: the prompt that several judge inputs share computed once, no padding.

Judge inputs that share a prompt (a group: the N completions of one GRPO prompt, the two responses of a
/compare, the chosen and rejected sides of a Bradley-Terry pair) share the longest common prefix of their
token ids, which the chat template makes end inside or after the assistant header. A group is packed as
[prefix, completion 1, ..., completion N], and several groups share a row of at most `max_tokens`:

- positions: the prefix 0..P-1, each completion P..P+C-1, as in its own unpacked sequence;
- attention: a prefix token sees the earlier tokens of its prefix; a completion token sees its whole prefix
  and the earlier tokens of its own completion, never a sibling completion nor another group;
- outputs: the scoring head's outputs at the last token of each completion.

So every output is the one the model gives the unpacked sequence, while the prefix and the padding are never
computed twice or at all. A group of one input is its whole sequence, causal. The attention runs per segment
(each query segment with only the keys it may see, exact on a CPU), which skips the masked blocks a dense mask
would still compute: PyTorch SDPA per segment, or on CUDA with flash-attn one varlen call for the whole row
(untested here: no GPU). The Bradley-Terry trainer packs its pairs as groups of two (training/packing.py); the
scalar judge of the server and the export's calibration pack the groups of scalar_model.prompt_once_outputs.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.utils import is_flash_attn_2_available

from .padding import length_groups

PACKED_ATTENTION = "judge_packed_groups"  # the attention implementation name a packing model is switched to
LAYOUT_KWARG = "packed_layout"  # the forward keyword that carries a row's RowLayout to every attention layer
ATTENTION_BATCH_SCORES = 1 << 22  # most attention scores per head of one batched SDPA call (16 MiB in fp32)


def packs_fast(device: str) -> bool:
    """Whether packed forwards beat padded ones on `device`. On a CPU they do (they skip the shared prompt and the
    padding). On CUDA without flash-attn the per-segment SDPA calls cost more than they save: on an H100 with a
    1.7B-parameter judge in bf16, prompt-once scored 0.48x the rewards/s of padded forwards at group size 8
    (benchmarks/README.md, section 6 on a GPU)."""
    return not device.startswith("cuda") or is_flash_attn_2_available()


def shared_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Tokens all the sequences of a group start with, leaving each at least its last token as its own
    completion (where its output is read): identical sequences, or one a prefix of another, still pack.
    0 for a group of one: its sequence is computed whole."""
    if len(sequences) < 2:
        return 0
    first, others = sequences[0], sequences[1:]
    limit = min(len(ids) for ids in sequences) - 1
    length = 0
    while length < limit and all(ids[length] == first[length] for ids in others):
        length += 1
    return length


def prefix_groups(sequences: Sequence[Sequence[int]], min_prefix: int) -> list[list[int]]:
    """Indices of `sequences` in groups that share a prefix (shared_prefix_length) of at least `min_prefix`
    tokens, chosen to leave the fewest prefix tokens computed more than once; every other sequence a group of
    its own. For token ids alone, where the prompt of each is not known: the judge prompts of a GRPO group
    (same rubric and question, different responses) share more than prompts that share only the rubric.

    In sorted order a group is a run of neighbours, and the prefix a run shares is the least that neighbours
    share, so the best runs come from a dynamic program over the sorted sequences (quadratic in their number)."""
    order = sorted(range(len(sequences)), key=lambda i: list(sequences[i]))
    neighbours = [shared_prefix_length([sequences[a], sequences[b]]) for a, b in itertools.pairwise(order)]
    saved = [0] * (len(order) + 1)  # saved[j]: most prefix tokens saved among the first j sorted sequences
    start = list(range(len(order) + 1))  # start[j]: where the last run of that best split begins
    for end in range(1, len(order) + 1):
        saved[end], start[end] = saved[end - 1], end - 1
        prefix = None
        for first in range(end - 2, -1, -1):
            prefix = neighbours[first] if prefix is None else min(prefix, neighbours[first])
            if prefix < min_prefix:
                break
            if saved[first] + (end - first - 1) * prefix > saved[end]:
                saved[end], start[end] = saved[first] + (end - first - 1) * prefix, first
    groups, end = [], len(order)
    while end:
        groups.append(sorted(order[start[end] : end]))
        end = start[end]
    return sorted(groups)


def useful_tokens(sequences: Sequence[Sequence[int]]) -> int:
    """The tokens a group needs computed: its prefix once and every completion."""
    return sum(len(ids) for ids in sequences) - (len(sequences) - 1) * shared_prefix_length(sequences)


@dataclass(frozen=True)
class Segment:
    """A run of query tokens [start, end) of a row that attends to the whole of its prefix [prompt_start,
    prompt_end) (empty for a prefix, or a sequence computed whole) and causally to itself."""

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

    def attention_batches(self, device: torch.device) -> list[tuple[torch.Tensor, ...]]:
        """The segments in padded batches for segment_sdpa_attention, on `device`, made once per row and device
        (every layer reads them): per batch, each segment's query positions (segments, queries), key positions
        (segments, keys), the boolean mask (segments, queries, keys) and which queries are real (segments,
        queries). Segments of similar query lengths share a batch (at most a quarter padding), of at most
        ATTENTION_BATCH_SCORES scores per head."""
        by_device = self.__dict__.setdefault("_attention_batches", {})  # a cache beside the frozen fields
        if device not in by_device:
            batches = (self._attention_batch(batch) for batch in self._segment_batches())
            by_device[device] = [tuple(tensor.to(device) for tensor in batch) for batch in batches]
        return by_device[device]

    def _segment_batches(self) -> list[list[Segment]]:
        batches = []
        for group in length_groups([s.end - s.start for s in self.segments], 0.25):
            segments = [self.segments[index] for index in group]
            scores = max(s.end - s.start for s in segments) * max(s.keys for s in segments)
            size = max(1, ATTENTION_BATCH_SCORES // scores)
            batches += [segments[start : start + size] for start in range(0, len(segments), size)]
        return batches

    @staticmethod
    def _attention_batch(segments: list[Segment]) -> tuple[torch.Tensor, ...]:
        queries = max(s.end - s.start for s in segments)
        keys = max(s.keys for s in segments)
        query_index = torch.zeros(len(segments), queries, dtype=torch.long)
        key_index = torch.zeros(len(segments), keys, dtype=torch.long)
        mask = torch.ones(len(segments), queries, keys, dtype=torch.bool)  # a padded query sees every key
        valid = torch.zeros(len(segments), queries, dtype=torch.bool)
        for row, s in enumerate(segments):
            length, prompt = s.end - s.start, s.prompt_end - s.prompt_start
            query_index[row, :length] = torch.arange(s.start, s.end)
            key_index[row, : s.keys] = torch.cat(
                [torch.arange(s.prompt_start, s.prompt_end), torch.arange(s.start, s.end)]
            )
            mask[row, :length] = False
            mask[row, :length, : s.keys] = torch.ones(length, s.keys, dtype=torch.bool).tril(prompt)
            valid[row, :length] = True
        return query_index, key_index, mask, valid

    def key_index(self, device) -> torch.Tensor:
        """Per segment, the row positions of its keys (prompt, then itself), concatenated: varlen's K/V gather."""
        ranges = [
            torch.cat([torch.arange(s.prompt_start, s.prompt_end), torch.arange(s.start, s.end)]) for s in self.segments
        ]
        return torch.cat(ranges).to(device)


@dataclass(frozen=True)
class PackedRow:
    """One forward: input_ids and position_ids (1, tokens), the layout, the row positions of the output
    tokens (one per sequence: the groups' sequences in order), and which groups of the packed list these are."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    layout: RowLayout
    output_positions: torch.Tensor
    groups: list[int]

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


def pack_row(groups: Sequence[Sequence[Sequence[int]]], indices: list[int], device=None) -> PackedRow:
    ids, positions, segments, outputs = [], [], [], []
    for index in indices:
        sequences = groups[index]
        prefix = shared_prefix_length(sequences)
        start = len(ids)
        ids += sequences[0][:prefix]
        positions += range(prefix)
        segments.append(Segment(start, start + prefix, start, start))
        for sequence in sequences:
            completion_start = len(ids)
            ids += sequence[prefix:]
            positions += range(prefix, len(sequence))
            segments.append(Segment(completion_start, len(ids), start, start + prefix))
            outputs.append(len(ids) - 1)
    return PackedRow(
        input_ids=torch.tensor([ids], dtype=torch.long, device=device),
        position_ids=torch.tensor([positions], dtype=torch.long, device=device),
        layout=RowLayout(tuple(s for s in segments if s.end > s.start), len(ids)),
        output_positions=torch.tensor(outputs, dtype=torch.long, device=device),
        groups=list(indices),
    )


def pack_groups(groups: Sequence[Sequence[Sequence[int]]], max_tokens: int, device=None) -> list[PackedRow]:
    """Groups of token sequences that share a prompt as packed rows of at most `max_tokens` tokens each."""
    lengths = [useful_tokens(sequences) for sequences in groups]
    return [pack_row(groups, indices, device) for indices in rows_by_token_budget(lengths, max_tokens)]


def scoring_head(model) -> torch.nn.Module:
    """The head (`score`) of a sequence-classification model, also inside an FSDP1 wrapper."""
    head = getattr(getattr(model, "module", model), "score", None)
    if not isinstance(head, torch.nn.Module):
        raise ValueError(f"{type(model).__name__} has no `score` head: not a sequence-classification model")
    return head


def packed_outputs(model, row: PackedRow) -> torch.Tensor:
    """The fp32 outputs (sequences, num_labels) of a packed row, differentiable; the model must use packed
    attention. The model's own output is pooled at the last non-pad token; the head's output at every position
    is taken instead, as it leaves the head inside the model's forward (which a wrapper such as FSDP must run
    itself)."""
    if model.config._attn_implementation != PACKED_ATTENTION:
        raise ValueError(
            f"the model must use packed attention (use_packed_attention), not {model.config._attn_implementation!r}"
        )
    scores = []
    handle = scoring_head(model).register_forward_hook(lambda module, args, output: scores.append(output))
    try:
        pooled = model(
            input_ids=row.input_ids, position_ids=row.position_ids, use_cache=False, **{LAYOUT_KWARG: row.layout}
        ).logits
    finally:
        handle.remove()
    # FSDP starts its backward (unsharding, gradient reduction) from hooks on the forward's outputs, so the
    # outputs must reach back through one: the pooled output joins them with weight zero.
    return scores[0][0, row.output_positions].float() + 0.0 * pooled.sum()


# --- attention ---------------------------------------------------------------------------------------


def use_packed_attention(model) -> None:
    """Switches a model's attention to the packed one: a forward that passes a RowLayout is a packed row; one
    that passes none is a plain SDPA forward (a padded batch with its 4D mask, scalar_model.padded_outputs).
    transformers builds no mask for an attention implementation it does not know, so a packed row gets none."""
    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    model.config._attn_implementation = PACKED_ATTENTION


def packed_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention-function contract: query (batch, heads, tokens, dim), key / value (batch, kv
    heads, tokens, dim); returns (batch, tokens, heads, dim)."""
    layout = kwargs.pop(LAYOUT_KWARG, None)
    if layout is None:
        if attention_mask is None or attention_mask.dim() != 4:
            raise ValueError(
                f"packed attention needs the row layout (pass {LAYOUT_KWARG}= to the model's forward) "
                "or a padded batch's 4D mask"
            )
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if query.shape[0] != 1 or dropout:
        raise ValueError("packed attention takes one row per forward and no attention dropout")
    if query.is_cuda and is_flash_attn_2_available():
        return flash_varlen_attention(query, key, value, layout, scaling), None
    return segment_sdpa_attention(module, query, key, value, layout, scaling), None


def segment_sdpa_attention(module, query, key, value, layout: RowLayout, scaling) -> torch.Tensor:
    """SDPA over the segments, each with only the keys it may see: a prefix causally over itself; a completion
    over its prefix and causally over itself. Segments of similar lengths are padded into one batched call
    (layout.attention_batches), so a row costs a few calls per layer, not one per segment."""
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups)[0], repeat_kv(value, groups)[0]
    query = query[0]
    heads, _, dim = query.shape
    output = query.new_empty(layout.tokens, heads, dim)
    for query_index, key_index, mask, valid in layout.attention_batches(query.device):
        out = F.scaled_dot_product_attention(
            query[:, query_index].transpose(0, 1),
            key[:, key_index].transpose(0, 1),
            value[:, key_index].transpose(0, 1),
            attn_mask=mask[:, None],
            scale=scaling,
        )
        output[query_index[valid]] = out.transpose(1, 2)[valid]
    return output.unsqueeze(0)


def flash_varlen_attention(query, key, value, layout: RowLayout, scaling) -> torch.Tensor:
    """flash-attn's varlen kernel over the row: query segments are contiguous; each one's keys (its prefix and
    itself) are gathered, and flash-attn's causal mask aligns to the last key, as a completion needs."""
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
