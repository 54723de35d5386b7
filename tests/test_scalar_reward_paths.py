"""The scalar reward is read alike by its three users: the Bradley-Terry trainer's forward pass, the export's
calibration (reward_center / reward_scale) and the judge server. For the same conversations each must give
the reward of every conversation computed alone (one sequence, no padding), also in batches that mix lengths.
The last tests show that this comparison catches a batch padded on the wrong side or read at the wrong token.
"""

from __future__ import annotations

import itertools
import json
import statistics

import pandas as pd
import pytest
import torch
from tensordict import TensorDict

from judge_core.protocol import templates
from judge_core.protocol.judge_api import JudgeItem
from judge_core.protocol.judge_spec import load_judge_spec
from judge_models import packing
from judge_models.config import JudgeConfig
from judge_models.scalar_model import padded_rewards, right_padded
from serving.judges.scalar import ScalarJudge
from training import bt_trainer, export

TOLERANCE = 1e-5  # fp32 rewards of the same tokens, padded or not, differ by about 1e-7
PROMPTS = ["Hi", "What is the capital city of France?", "Count to five, please.", "Name a colour."]
ANSWERS = [
    "Paris.",
    "The capital city of France is Paris, on the Seine.",
    "one two three four five",
    "Red, or blue, or green, or any colour of the rainbow that you like best today.",
]
# (chosen, rejected) pairs whose two sides differ in length, so that every pair is padded in a batch.
PAIRS = [
    ((PROMPTS[0], ANSWERS[3]), (PROMPTS[0], ANSWERS[0])),
    ((PROMPTS[1], ANSWERS[1]), (PROMPTS[1], ANSWERS[0])),
    ((PROMPTS[2], ANSWERS[2]), (PROMPTS[2], ANSWERS[3])),
    ((PROMPTS[3], ANSWERS[0]), (PROMPTS[3], ANSWERS[3])),
    ((PROMPTS[1], ANSWERS[2] + " six"), (PROMPTS[1], ANSWERS[2])),
    ((PROMPTS[2], ANSWERS[1]), (PROMPTS[2], ANSWERS[1] + " Yes.")),
]
# The pairs' sequences in the order the export scores them: pair 0 chosen, pair 0 rejected, pair 1 chosen...
SEQUENCES = [side for pair in PAIRS for side in pair]


@pytest.fixture(scope="module")
def tokenizer(tiny_scalar_judge_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_scalar_judge_dir)


def load_model(model_dir, attn_implementation: str = "sdpa"):
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation=attn_implementation).eval()


@pytest.fixture(scope="module")
def model(tiny_scalar_judge_dir):
    return load_model(tiny_scalar_judge_dir)


@pytest.fixture(scope="module")
def alone(model, tokenizer) -> list[float]:
    """The reference: each of SEQUENCES through the model on its own, tokenized by transformers' chat template
    (not by the code under test), its reward read at its last token."""
    rewards = []
    for prompt, completion in SEQUENCES:
        ids = tokenizer.apply_chat_template(templates.conversation_messages(prompt, completion), tokenize=True)
        with torch.inference_mode():
            rewards.append(model(input_ids=torch.tensor([ids])).logits[0, 0].item())
    ordered = sorted(rewards)
    assert min(b - a for a, b in itertools.pairwise(ordered)) > 10 * TOLERANCE, "indistinct rewards"
    return rewards


def sequence_ids(tokenizer) -> list[list[int]]:
    conversations = [templates.conversation_messages(prompt, completion) for prompt, completion in SEQUENCES]
    return templates.conversation_token_ids(tokenizer, conversations)


def mismatches(rewards: list[float], alone: list[float]) -> list[int]:
    """The indices of the rewards that differ from the reference by more than the tolerance."""
    return [index for index, (a, b) in enumerate(zip(rewards, alone, strict=True)) if not abs(a - b) <= TOLERANCE]


@pytest.fixture(scope="module")
def pair_file(tmp_path_factory) -> str:
    """PAIRS as a Bradley-Terry pair file; each row's margin is its index, to find the row after sorting."""
    rows = [
        {
            "chosen": json.dumps(templates.conversation_messages(*chosen)),
            "rejected": json.dumps(templates.conversation_messages(*rejected)),
            "margin": float(index),
        }
        for index, (chosen, rejected) in enumerate(PAIRS)
    ]
    path = tmp_path_factory.mktemp("pairs") / "val.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def trainer_batch(pair_file: str, tokenizer) -> TensorDict:
    """All pairs as the trainer's data loader hands them over: one batch padded to its longest sequence."""
    config = bt_trainer.PairDataConfig(max_length=4096, truncation="left", need_margin=True)
    dataset = bt_trainer.PairDataset(pair_file, tokenizer, config)
    collate = bt_trainer.PairCollator(tokenizer.pad_token_id)
    return TensorDict(collate([dataset[i] for i in range(len(dataset))]), batch_size=len(dataset))


def micro_batch_rewards(model, batch: TensorDict) -> list[float]:
    """The rewards of a training step's micro-batches of 2 pairs (each mixing lengths), in SEQUENCES order."""
    by_pair = {}
    with torch.no_grad():
        for micro_batch in bt_trainer.length_sorted_micro_batches(batch, 2):
            rewards, attention_mask = bt_trainer.pair_rewards(model, micro_batch)
            assert not attention_mask.all(), "each micro-batch must mix lengths"
            for margin, pair in zip(micro_batch["margin"].tolist(), rewards.tolist(), strict=True):
                by_pair[int(margin)] = pair
    return [reward for index in range(len(PAIRS)) for reward in by_pair[index]]


def test_the_trainers_forward_gives_each_sequences_own_reward(model, tokenizer, pair_file, alone):
    batch = trainer_batch(pair_file, tokenizer)
    with torch.no_grad():
        whole, _ = bt_trainer.pair_rewards(model, batch)  # a validation step's micro-batch
    assert whole.flatten().tolist() == pytest.approx(alone, abs=TOLERANCE)
    assert micro_batch_rewards(model, batch) == pytest.approx(alone, abs=TOLERANCE)


def test_the_trainers_rewards_carry_gradients(model, tokenizer, pair_file):
    rewards, _ = bt_trainer.pair_rewards(model, trainer_batch(pair_file, tokenizer))
    rewards.sum().backward()
    gradients = {name: parameter.grad for name, parameter in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    assert [name for name, gradient in gradients.items() if gradient is None or not gradient.any()] == []


def test_the_exports_calibration_uses_each_sequences_own_reward(tiny_scalar_judge_dir, pair_file, alone):
    pairs, rewards = export.validation_rewards(tiny_scalar_judge_dir, pair_file, max_length=4096, truncation="left")
    rows = packing.pack_groups([list(pair[:2]) for pair in pairs.pairs], export.SCORING_BATCH_SIZE * 4096)
    assert max(len(row.groups) for row in rows) > 1, "a calibration pass must pack pairs of several lengths"
    assert rewards == pytest.approx(alone, abs=TOLERANCE)
    summary = export.validation_summary(pairs, rewards)
    assert summary["reward_center"] == pytest.approx(statistics.fmean(alone), abs=TOLERANCE)
    assert summary["reward_scale"] == pytest.approx(statistics.pstdev(alone), abs=TOLERANCE)


@pytest.mark.parametrize("max_padding_fraction", [0.0, 0.9])  # each length alone; every length in one pass
def test_the_server_judges_raw_reward_is_each_sequences_own(tiny_scalar_judge_dir, alone, max_padding_fraction):
    config = JudgeConfig(model=str(tiny_scalar_judge_dir), max_padding_fraction=max_padding_fraction)
    judge = ScalarJudge(config, load_judge_spec(tiny_scalar_judge_dir))
    verdicts = judge.score_batch([JudgeItem(prompt, completion) for prompt, completion in SEQUENCES])
    assert [verdict.metadata["raw_reward"] for verdict in verdicts] == pytest.approx(alone, abs=TOLERANCE)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_padded_rewards_are_right_for_each_attention(tiny_scalar_judge_dir, tokenizer, alone, attn_implementation):
    """SDPA gets the 4D causal mask, eager the 2D padding mask (it would add a boolean 4D mask to its scores)."""
    model = load_model(tiny_scalar_judge_dir, attn_implementation)
    with torch.inference_mode():
        rewards = padded_rewards(model, *right_padded(sequence_ids(tokenizer), tokenizer.pad_token_id))
    assert rewards.tolist() == pytest.approx(alone, abs=TOLERANCE)


def test_a_left_padded_trainer_batch_would_be_caught(model, tokenizer, pair_file, alone):
    """Left padding alone changes no reward of this model (its positions are relative and the mask is right),
    but the trainer cuts each micro-batch to its longest sequence from the left, which would cut real tokens."""
    batch = trainer_batch(pair_file, tokenizer)
    pads = (batch["attention_mask"] == 0).sum(-1).flatten().tolist()
    left = batch.clone()
    for key in ("input_ids", "attention_mask"):
        rows = batch[key].flatten(0, 1)
        left[key] = torch.stack([row.roll(pad) for row, pad in zip(rows, pads, strict=True)]).view_as(batch[key])
    assert mismatches(micro_batch_rewards(model, left), alone) != []


def test_a_reward_read_at_the_wrong_token_would_be_caught(tiny_scalar_judge_dir, tokenizer, alone):
    """A model whose config names another pad id than the batch's reads each padded row at its last padding."""
    model = load_model(tiny_scalar_judge_dir)
    input_ids, padding_mask = right_padded(sequence_ids(tokenizer), tokenizer.pad_token_id)
    model.config.pad_token_id = next(i for i in range(len(tokenizer)) if not (input_ids == i).any())
    with torch.inference_mode():
        wrong = mismatches(padded_rewards(model, input_ids, padding_mask).tolist(), alone)
    padded_rows = [row for row, row_mask in enumerate(padding_mask) if not row_mask.all()]
    assert wrong == padded_rows and len(padded_rows) == len(SEQUENCES) - 1
