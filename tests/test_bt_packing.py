"""Packed Bradley-Terry forwards (training/packing.py, on judge_models/packing.py) against the unpacked model
on the tiny judge.

The reference is `padded_rewards`, the reward every other path reads (test_scalar_reward_paths.py checks it
against each sequence alone). Pairs mix prompt and response lengths, have multi-turn prompts, and share rows;
the last tests show that the comparison catches responses that see each other and restarted positions.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tensordict import TensorDict

from judge_core.protocol import templates
from judge_models import packing as judge_packing
from judge_models.scalar_model import padded_rewards, right_padded
from training import bt_trainer, packing

TOLERANCE = 1e-4  # fp32; packed and unpacked rewards of the tiny model differ by about 1e-7
TURNS = [
    [{"role": "user", "content": "Hi"}],
    [
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "What is the capital city of France?"},
    ],
    [
        {"role": "user", "content": "Count to three."},
        {"role": "assistant", "content": "one two three"},
        {"role": "user", "content": "Now count backwards from five, slowly, one number per word."},
    ],
]
ANSWERS = ["Paris.", "five four three two one", "Red, or blue, or green, or any colour of the rainbow you like."]


def pair_conversations() -> list[tuple[list[dict], list[dict]]]:
    pairs = [
        (turns + [{"role": "assistant", "content": chosen}], turns + [{"role": "assistant", "content": rejected}])
        for turns in TURNS
        for chosen, rejected in [(ANSWERS[0], ANSWERS[2]), (ANSWERS[1], ANSWERS[0]), (ANSWERS[2], ANSWERS[1])]
    ]
    same = TURNS[0] + [{"role": "assistant", "content": ANSWERS[0]}]
    longer = TURNS[1] + [{"role": "assistant", "content": ANSWERS[1] + " zero"}]
    shorter = TURNS[1] + [{"role": "assistant", "content": ANSWERS[1]}]
    return [*pairs, (same, same), (shorter, longer)]  # identical sides; one side a prefix of the other


@pytest.fixture(scope="module")
def tokenizer(tiny_scalar_judge_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_scalar_judge_dir)


def load_model(model_dir, packed: bool):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="sdpa")
    if packed:
        judge_packing.use_packed_attention(model)
    return model


@pytest.fixture(scope="module")
def models(tiny_scalar_judge_dir):
    return {"padded": load_model(tiny_scalar_judge_dir, False), "packed": load_model(tiny_scalar_judge_dir, True)}


@pytest.fixture(scope="module")
def pairs(tokenizer) -> list[tuple[list[int], list[int]]]:
    conversations = pair_conversations()
    ids = templates.conversation_token_ids(tokenizer, [side for pair in conversations for side in pair])
    return list(zip(ids[0::2], ids[1::2], strict=True))


def unpacked_rewards(model, pairs, pad_token_id) -> torch.Tensor:
    input_ids, padding_mask = right_padded([side for pair in pairs for side in pair], pad_token_id)
    return padded_rewards(model, input_ids, padding_mask).view(-1, 2)


def rewards_of_rows(model, rows: list[judge_packing.PackedRow], pairs: int) -> torch.Tensor:
    rewards = [None] * pairs
    for row in rows:
        for index, reward in zip(row.groups, packing.packed_rewards(model, row), strict=True):
            rewards[index] = reward
    return torch.stack(rewards)


def shared_rows(pairs) -> list[judge_packing.PackedRow]:
    """Rows of a budget that puts several pairs in most rows."""
    lengths = [packing.useful_tokens(*pair) for pair in pairs]
    rows = packing.pack_pairs(pairs, max_tokens=3 * max(lengths))
    assert max(len(row.groups) for row in rows) >= 3 and len(rows) > 1
    return rows


def test_a_pairs_prompt_is_packed_once_with_positions_of_its_unpacked_sequences():
    chosen, rejected = [7, 8, 9, 1, 2], [7, 8, 9, 3]
    row = packing.pack_pairs([([4, 5], [4, 6, 6]), (chosen, rejected)], max_tokens=100)[0]
    assert row.groups == [1, 0]  # longest first
    assert row.input_ids.tolist() == [[7, 8, 9, 1, 2, 3, 4, 5, 6, 6]]
    assert row.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 0, 1, 1, 2]]
    assert row.output_positions.tolist() == [4, 5, 7, 9]
    # identical sides, or one side a prefix of the other: each keeps its last token as its response
    assert packing.shared_prompt_length([1, 2, 3], [1, 2, 3]) == 2
    assert packing.shared_prompt_length([1, 2], [1, 2, 3]) == 1
    assert packing.useful_tokens([1, 2], [1, 2, 3]) == 4


def test_rows_hold_every_pair_once_within_the_budget():
    lengths = [5, 9, 3, 12, 7, 1, 4]
    rows = judge_packing.rows_by_token_budget(lengths, max_tokens=10)
    assert sorted(index for row in rows for index in row) == list(range(len(lengths)))
    assert rows == [[3], [1, 5], [4, 2], [0, 6]]  # first fit, longest first; 12 is longer than the budget: alone


def test_packed_rewards_equal_the_unpacked_models(models, pairs, tokenizer):
    with torch.no_grad():
        expected = unpacked_rewards(models["padded"], pairs, tokenizer.pad_token_id)
        packed = rewards_of_rows(models["packed"], shared_rows(pairs), len(pairs))
        alone = rewards_of_rows(models["packed"], packing.pack_pairs(pairs, max_tokens=1), len(pairs))
    assert (expected[:, 0] - expected[:, 1]).abs()[:-2].min() > 10 * TOLERANCE, "indistinct rewards"
    assert torch.allclose(packed, expected, atol=TOLERANCE, rtol=0)
    assert torch.allclose(alone, expected, atol=TOLERANCE, rtol=0)


def bt_loss_gradients(model, rewards: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    bt_trainer.bradley_terry_losses(rewards, torch.zeros(len(rewards)), "none").mean().backward()
    names = ("score.weight", "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight")
    gradients = {name: parameter.grad.clone() for name, parameter in model.named_parameters() if name in names}
    assert len(gradients) == len(names)
    return gradients


def test_packed_gradients_equal_the_unpacked_models(models, pairs, tokenizer):
    expected = bt_loss_gradients(models["padded"], unpacked_rewards(models["padded"], pairs, tokenizer.pad_token_id))
    packed = bt_loss_gradients(models["packed"], rewards_of_rows(models["packed"], shared_rows(pairs), len(pairs)))
    for name, gradient in expected.items():
        assert gradient.abs().max() > 0, name
        assert torch.allclose(packed[name], gradient, atol=1e-6, rtol=1e-4), name


def test_the_trainers_packed_forwards_give_the_padded_rewards_and_count_no_padding(models, pairs, tokenizer):
    collate = bt_trainer.PairCollator(tokenizer.pad_token_id)
    items = [
        (torch.tensor(chosen), torch.tensor(rejected), float(index)) for index, (chosen, rejected) in enumerate(pairs)
    ]
    batch = TensorDict(collate(items), batch_size=len(items))
    results = {}
    for name, packed in (("padded", False), ("packed", True)):
        config = bt_trainer.BradleyTerryConfig(packing=packed, max_tokens_per_forward=240)
        with torch.no_grad():
            forwards = list(bt_trainer.pair_forwards(models[name], batch, config, micro_batch_size=4, max_length=64))
        rewards = torch.cat([rewards for rewards, _, _ in forwards])
        order = torch.cat([margins for _, margins, _ in forwards]).long()  # each pair's margin is its index
        counts = torch.tensor([counts for _, _, counts in forwards]).sum(0).tolist()
        results[name] = (rewards[order.argsort()], counts, len(forwards))
    (padded, padded_counts, _), (packed, packed_counts, packed_forwards) = results["padded"], results["packed"]
    assert torch.allclose(packed, padded, atol=TOLERANCE, rtol=0)
    tokens = sum(len(chosen) + len(rejected) for chosen, rejected in pairs)
    useful = sum(packing.useful_tokens(*pair) for pair in pairs)
    assert packed_counts == [tokens, useful, useful, 0]
    assert padded_counts[:2] == [tokens, useful] and padded_counts[3] == padded_counts[2] - tokens > 0
    assert packed_forwards < len(pairs) / 2


def test_a_response_seeing_the_other_one_would_be_caught(models, pairs, tokenizer):
    with torch.no_grad():
        expected = unpacked_rewards(models["padded"], pairs, tokenizer.pad_token_id)
        row = packing.pack_pairs(pairs[:1], max_tokens=10_000)[0]
        prompt, chosen, rejected = row.layout.segments
        leaky = dataclasses.replace(rejected, prompt_end=rejected.start)  # the rejected one sees the chosen one
        layout = dataclasses.replace(row.layout, segments=(prompt, chosen, leaky))
        wrong = packing.packed_rewards(models["packed"], dataclasses.replace(row, layout=layout))
        right = packing.packed_rewards(models["packed"], row)
    assert torch.allclose(right, expected[0], atol=TOLERANCE, rtol=0)
    assert abs(wrong[0, 0] - expected[0, 0]) <= TOLERANCE and abs(wrong[0, 1] - expected[0, 1]) > 100 * TOLERANCE


def test_responses_positions_restarting_at_zero_would_be_caught(models, pairs, tokenizer):
    with torch.no_grad():
        expected = unpacked_rewards(models["padded"], pairs[:1], tokenizer.pad_token_id)
        row = packing.pack_pairs(pairs[:1], max_tokens=10_000)[0]
        restarted = torch.cat([torch.arange(s.end - s.start) for s in row.layout.segments])[None]
        wrong = packing.packed_rewards(models["packed"], dataclasses.replace(row, position_ids=restarted))
    assert (wrong - expected).abs().max() > 2 * TOLERANCE  # a small model's rewards move little with positions


def test_a_packed_model_refuses_a_forward_without_a_row_layout(models, pairs):
    with pytest.raises(ValueError, match="packed attention needs the row layout"), torch.no_grad():
        models["packed"](input_ids=torch.tensor([pairs[0][0]]))
    with pytest.raises(ValueError, match="must use packed attention"), torch.no_grad():
        packing.packed_rewards(models["padded"], packing.pack_pairs(pairs[:1], max_tokens=100)[0])
