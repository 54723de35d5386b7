"""Every parquet file data_prep writes for verl loads with verl 0.6.1's own dataset classes."""

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
from verl.utils.dataset.rl_dataset import RLHFDataset

from data_prep import helpsteer2, offline, rewardbench2
from data_prep.records import read_records
from judge_core.protocol import templates
from tests import test_data_prep_helpsteer2 as hs2_standin
from tests import test_data_prep_rewardbench2 as rb2_standin

SOURCES = ("offline", "helpsteer2", "rewardbench2")
SFT_FILES = [f"{source}/sft/{split}.parquet" for source in ("offline", "helpsteer2") for split in ("train", "val")]
SFT_FILES += [
    f"offline/{judge}/{split}.parquet"
    for judge in ("sft_judge_pointwise", "sft_judge_pairwise")
    for split in ("train", "val")
]
GRPO_FILES = [
    f"{source}/grpo/{mode}/{split}.parquet"
    for source in SOURCES
    for mode in ("pointwise", "pairwise")
    for split in ("train", "val")
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("verl_inputs")
    offline.generate(root / "offline", offline.OfflineConfig(train_size=30, val_size=10, eval_size=10))
    upstream = root / "upstream"
    upstream.mkdir()
    paths = [
        hs2_standin.write_jsonl_gz(upstream / f"{name}.jsonl.gz", rows)
        for name, rows in (
            ("train", hs2_standin.TRAIN),
            ("validation", hs2_standin.VALIDATION),
            ("preference", hs2_standin.PREFERENCES),
        )
    ]
    helpsteer2.convert(helpsteer2.Sources.from_files(*paths), root / "helpsteer2")
    rb2_file = upstream / "rb2.parquet"
    pq.write_table(pa.Table.from_pylist(rb2_standin.UPSTREAM, schema=rb2_standin.UPSTREAM_SCHEMA), rb2_file)
    rewardbench2.convert(read_records(rb2_file), root / "rewardbench2")
    return root


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.mark.parametrize("name", SFT_FILES)
def test_sft_files_load_with_multiturn_sft_dataset(written, tokenizer, name):
    rows = pd.read_parquet(written / name)["messages"].tolist()
    config = {"max_length": 1024, "truncation": "error", "multiturn": {"messages_key": "messages"}}
    dataset = MultiTurnSFTDataset(str(written / name), tokenizer, config=config)
    assert len(dataset) == len(rows) > 0
    for index, messages in enumerate(rows):
        item = dataset[index]
        trained_on = tokenizer.decode(item["input_ids"][item["loss_mask"].bool()])
        # the loss covers every assistant turn (ChatML: content, end-of-turn, newline) and nothing else
        assert trained_on == "".join(m["content"] + "<|im_end|>\n" for m in messages if m["role"] == "assistant")
        assert item["attention_mask"].sum() < 1024  # nothing was cut


@pytest.mark.parametrize("name", GRPO_FILES)
def test_grpo_files_load_with_rlhf_dataset(written, tokenizer, tmp_path, name):
    rows = pd.read_parquet(written / name).to_dict("records")
    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 2048,
            "truncation": "error",
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "return_raw_chat": True,
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    dataset = RLHFDataset(str(written / name), tokenizer, config)
    assert len(dataset) == len(rows) > 0  # a row verl cannot template would have been filtered out
    for index, row in enumerate(rows):
        item = dataset[index]
        assert item["raw_prompt"] == [dict(m) for m in row["prompt"]]
        assert item["data_source"] == row["data_source"]
        assert item["extra_info"]["index"] == item["index"] == index
        assert templates.read_ground_truth(item["reward_model"]["ground_truth"]) == json.loads(
            row["reward_model"]["ground_truth"]
        )
        assert item["input_ids"].shape == (2048,)


def test_overlong_prompts_are_filtered_by_verl(written, tokenizer, tmp_path):
    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 16,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    assert len(RLHFDataset(str(written / GRPO_FILES[0]), tokenizer, config)) == 0
