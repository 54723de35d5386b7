"""The Bradley-Terry trainer's pieces without a process group: pair files, batching, loss, export merge."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
from tensordict import TensorDict
from torch.distributed.tensor import Replicate, Shard

from training import bt_trainer, export


def conversation(question: str, answer: str) -> str:
    return json.dumps([{"role": "user", "content": question}, {"role": "assistant", "content": answer}])


def write_pairs(path, rows) -> str:
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def data_config(**overrides) -> bt_trainer.PairDataConfig:
    return bt_trainer.PairDataConfig(**{"max_length": 4096, "truncation": "left", "need_margin": False, **overrides})


GOOD = {
    "chosen": conversation("What is 2 + 2?", "It is 4."),
    "rejected": conversation("What is 2 + 2?", "5."),
    "margin": 2.0,
}


@pytest.mark.parametrize(
    "row, field, message",
    [
        ({**GOOD, "chosen": "not json"}, "chosen", "not valid JSON"),
        ({**GOOD, "rejected": json.dumps({"role": "user"})}, "rejected", "non-empty JSON list"),
        ({**GOOD, "chosen": json.dumps([{"role": "robot", "content": "x"}])}, "chosen", "role"),
        (
            {**GOOD, "rejected": json.dumps([{"role": "user", "content": "only a question"}])},
            "rejected",
            "last message must be the assistant",
        ),
        ({**GOOD, "margin": -1.0}, "margin", "finite number >= 0"),
        ({**GOOD, "margin": float("nan")}, "margin", "finite number >= 0"),
    ],
)
def test_a_bad_row_is_named_by_file_row_and_field(tmp_path, tokenizer, row, field, message):
    path = write_pairs(tmp_path / "pairs.parquet", [GOOD, row])
    with pytest.raises(bt_trainer.PairDataError, match=rf"pairs\.parquet row 1 field {field}: .*{message}"):
        bt_trainer.PairDataset(path, tokenizer, data_config(need_margin=True))


def test_missing_columns_are_named(tmp_path, tokenizer):
    path = write_pairs(tmp_path / "pairs.parquet", [{"chosen": GOOD["chosen"], "rejected": GOOD["rejected"]}])
    bt_trainer.PairDataset(path, tokenizer, data_config())  # margin is optional while the loss ignores it
    with pytest.raises(bt_trainer.PairDataError, match=r"missing column\(s\) \['margin'\]"):
        bt_trainer.PairDataset(path, tokenizer, data_config(need_margin=True))
    path = write_pairs(tmp_path / "chosen_only.parquet", [{"chosen": GOOD["chosen"]}])
    with pytest.raises(bt_trainer.PairDataError, match=r"missing column\(s\) \['rejected'\]"):
        bt_trainer.PairDataset(path, tokenizer, data_config())


def test_pairs_are_tokenized_as_the_judge_server_reads_them(tmp_path, tokenizer):
    path = write_pairs(tmp_path / "pairs.parquet", [GOOD])
    chosen, rejected, margin = bt_trainer.PairDataset(path, tokenizer, data_config(need_margin=True))[0]
    text = tokenizer.apply_chat_template(json.loads(GOOD["chosen"]), tokenize=False)
    assert chosen.tolist() == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert rejected.tolist() != chosen.tolist() and margin == 2.0


@pytest.mark.parametrize("truncation", ["left", "right"])
def test_long_sequences_are_truncated_and_counted(tmp_path, tokenizer, truncation):
    path = write_pairs(tmp_path / "pairs.parquet", [GOOD, {**GOOD, "chosen": conversation("Why?", "word " * 200)}])
    full = bt_trainer.PairDataset(path, tokenizer, data_config())
    limit = max(len(full[0][0]), len(full[0][1]))
    cut = bt_trainer.PairDataset(path, tokenizer, data_config(max_length=limit, truncation=truncation))
    assert cut.truncated == [f"{path} row 1 field chosen"]
    expected = full[1][0][-limit:] if truncation == "left" else full[1][0][:limit]
    assert torch.equal(cut[1][0], expected) and all(
        torch.equal(a, b) for a, b in zip(cut[0][:2], full[0][:2], strict=True)
    )
    assert "1 sequences longer than max_length" in cut.describe()


def test_truncation_error_names_the_row(tmp_path, tokenizer):
    path = write_pairs(tmp_path / "pairs.parquet", [GOOD, {**GOOD, "rejected": conversation("Why?", "word " * 200)}])
    with pytest.raises(bt_trainer.PairDataError, match=r"row 1 field rejected: \d+ tokens, more than max_length 64"):
        bt_trainer.PairDataset(path, tokenizer, data_config(max_length=64, truncation="error"))


def test_a_sequence_ending_with_the_pad_token_is_refused(tmp_path, tokenizer):
    path = write_pairs(
        tmp_path / "pairs.parquet", [{**GOOD, "chosen": conversation("Hi", "bye" + tokenizer.pad_token)}]
    )
    cut_before_template_end = data_config(max_length=4096, truncation="right")
    dataset = bt_trainer.PairDataset(path, tokenizer, cut_before_template_end)
    pad_position = dataset[0][0].tolist().index(tokenizer.pad_token_id)
    with pytest.raises(bt_trainer.PairDataError, match="row 0 field chosen: .*ends with the pad token"):
        bt_trainer.PairDataset(path, tokenizer, data_config(max_length=pad_position + 1, truncation="right"))


def test_collated_batches_are_padded_to_their_longest_pair_and_micro_batches_to_theirs():
    collate = bt_trainer.PairCollator(pad_token_id=0)
    pairs = [([5] * 3, [6] * 2, 1.0), ([7] * 9, [8] * 4, 2.0), ([9] * 2, [9] * 2, 3.0), ([4] * 8, [4] * 7, 4.0)]
    batch = TensorDict(collate(pairs), batch_size=4)
    assert batch["input_ids"].shape == (4, 2, 9) and batch["input_ids"][0, 0, 3:].eq(0).all()
    micro_batches = bt_trainer.length_sorted_micro_batches(batch, 2)
    assert [mb["margin"].tolist() for mb in micro_batches] == [[2.0, 4.0], [1.0, 3.0]]
    longest = [int(mb["attention_mask"].sum(-1).max()) for mb in micro_batches]
    assert longest == [9, 3]


def test_losses_for_each_margin_mode():
    rewards = torch.tensor([[2.0, 1.0], [0.0, 1.0]])
    margins = torch.tensor([3.0, 1.0])
    plain = [-math.log(1 / (1 + math.exp(-1))), -math.log(1 / (1 + math.exp(1)))]
    assert bt_trainer.bradley_terry_losses(rewards, margins, "none").tolist() == pytest.approx(plain)
    assert bt_trainer.bradley_terry_losses(rewards, margins, "scaled").tolist() == pytest.approx(
        [3 * plain[0], plain[1]]
    )
    offset = [-math.log(1 / (1 + math.exp(2))), -math.log(1 / (1 + math.exp(2)))]
    assert bt_trainer.bradley_terry_losses(rewards, margins, "offset").tolist() == pytest.approx(offset)


def test_metrics_are_ratios_of_sums_so_uneven_shares_weigh_by_pairs():
    # token counts: tokens, useful, computed, padding (a padded forward, then a packed one)
    first = bt_trainer.pair_totals(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([[1.0, 0.0]] * 3), [24, 18, 28, 4])
    second = bt_trainer.pair_totals(torch.tensor([4.0]), torch.tensor([[0.0, 0.0]]), [4, 3, 3, 0])
    metrics = bt_trainer.pair_metrics(first + second, "val")
    assert metrics == {"val/loss": 7 / 4, "val/accuracy": 3 / 4, "val/reward_gap": 3 / 4}
    assert bt_trainer.padding_share(first + second) == pytest.approx(4 / 31)
    assert bt_trainer.token_counts(first + second, "train") == {
        "train/real_tokens": 28,
        "train/useful_tokens": 21,
        "train/computed_tokens": 31,
    }


def test_a_padded_forwards_token_counts_count_each_prompt_once_as_useful():
    collate = bt_trainer.PairCollator(pad_token_id=0)
    pairs = [([5, 6, 7, 8], [5, 6, 9], 1.0), ([3, 4], [3, 4], 1.0)]  # a 2-token prompt; identical sides
    batch = TensorDict(collate(pairs), batch_size=2)
    counts = bt_trainer.padded_token_counts(batch, batch["attention_mask"].flatten(0, 1))
    assert counts == [4 + 3 + 2 + 2, (2 + 2 + 1) + (1 + 1 + 1), 16, 16 - 11]


def test_margin_mode_and_unsupported_options_are_refused():
    with pytest.raises(ValueError, match="bt.margin_mode"):
        bt_trainer.BradleyTerryConfig(margin_mode="hinge")
    with pytest.raises(ValueError, match="bt.packing must be true or false"):
        bt_trainer.BradleyTerryConfig(packing="yes")
    with pytest.raises(ValueError, match="bt.max_tokens_per_forward must be an integer >= 2 or null"):
        bt_trainer.BradleyTerryConfig(max_tokens_per_forward=0)
    assert bt_trainer.BradleyTerryConfig().token_budget(micro_batch_size=4, max_length=256) == 2048
    assert bt_trainer.BradleyTerryConfig(max_tokens_per_forward=300).token_budget(4, 256) == 300
    with pytest.raises(ValueError, match="data.truncation"):
        data_config(truncation="middle")


def test_shards_merge_by_placement_with_uneven_chunks_and_replicas():
    full = torch.arange(21.0).reshape(7, 3)
    halves = list(full.chunk(2))
    assert torch.equal(export.assemble_shards("w", halves, torch.tensor([0, 1]), [Shard(0)], full.shape), full)
    columns = list(full.chunk(2, dim=1))
    assert torch.equal(export.assemble_shards("w", columns, torch.tensor([0, 1]), [Shard(1)], full.shape), full)
    hybrid = [halves[rank % 2] for rank in range(4)]  # HSDP: ranks (0, 1) and (2, 3) hold the same halves
    mesh = torch.tensor([[0, 1], [2, 3]])
    assert torch.equal(export.assemble_shards("w", hybrid, mesh, [Replicate(), Shard(0)], full.shape), full)
    with pytest.raises(ValueError, match="w: merged shape"):
        export.assemble_shards("w", [halves[0], halves[0]], torch.tensor([0, 1]), [Shard(0)], full.shape)
