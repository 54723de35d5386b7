"""The offline policy dataset (`policy/{train,val,test}.parquet`): verl RL rows of a policy whose reward comes
from a judge through judge_rewards.verl_reward. Row by row, split by fact, deterministic, loaded by verl
0.6.1's RLHFDataset, and carrying what the reward adapter reads."""

from __future__ import annotations

import pandas as pd
import pytest
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset

from data_prep import offline, outputs
from judge_core import rules
from judge_rewards import verl_reward
from tests.support.servers import free_port
from tests.test_data_prep_offline import QUESTIONS

SMALL = offline.OfflineConfig(train_size=200, val_size=40, eval_size=50, seed=3)
POLICY_FILES = [outputs.split_file(outputs.POLICY, split) for split in (*outputs.SPLITS, outputs.TEST)]
EXTRA_INFO_KEYS = ["split", "index", "prompt_id", "subset", "source", "question", "answer_type"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("offline_policy")
    offline.generate(out, SMALL)
    return out


def read(out, name):
    return pd.read_parquet(out / name).to_dict("records")


def test_first_rows_of_the_default_dataset(tmp_path):
    offline.generate(tmp_path)
    rows = read(tmp_path, "policy/train.parquet")[:3]
    for row in rows:
        row["prompt"] = [dict(message) for message in row["prompt"]]
    assert rows == [
        {
            "data_source": "offline/policy",
            "prompt": [{"role": "user", "content": "What is the capital of Indonesia?"}],
            "ability": "qa",
            "reward_model": {"style": "model", "ground_truth": "Jakarta"},
            "extra_info": {
                "split": "train",
                "index": 0,
                "prompt_id": "capitals/Indonesia",
                "subset": "capitals",
                "source": "offline",
                "question": "What is the capital of Indonesia?",
                "answer_type": "TEXT",
            },
        },
        {
            "data_source": "offline/policy",
            "prompt": [{"role": "user", "content": "What is the opposite of north?"}],
            "ability": "qa",
            "reward_model": {"style": "model", "ground_truth": "south"},
            "extra_info": {
                "split": "train",
                "index": 1,
                "prompt_id": "opposites/north",
                "subset": "opposites",
                "source": "offline",
                "question": "What is the opposite of north?",
                "answer_type": "TEXT",
            },
        },
        {
            "data_source": "offline/policy",
            "prompt": [{"role": "user", "content": "How many centimeters are in a meter?"}],
            "ability": "qa",
            "reward_model": {"style": "model", "ground_truth": "100"},
            "extra_info": {
                "split": "train",
                "index": 2,
                "prompt_id": "units/centimeters/a meter",
                "subset": "units",
                "source": "offline",
                "question": "How many centimeters are in a meter?",
                "answer_type": "NUMBER",
            },
        },
    ]


@pytest.mark.parametrize("name", POLICY_FILES)
def test_every_row_asks_a_generated_question_with_its_facts_answer(small, name):
    split = name.split("/")[-1].removesuffix(".parquet")
    rows = read(small, name)
    for index, row in enumerate(rows):
        question = row["extra_info"]["question"]
        category, fact, _ = QUESTIONS[question]
        assert [dict(m) for m in row["prompt"]] == [{"role": "user", "content": question}]
        assert (row["data_source"], row["ability"]) == (offline.DATA_SOURCE_POLICY, "qa")
        assert row["reward_model"] == {"style": "model", "ground_truth": fact.answer}
        assert list(row["extra_info"]) == EXTRA_INFO_KEYS
        assert row["extra_info"] == {
            "split": split,
            "index": index,
            "prompt_id": f"{category}/{fact.key}",
            "subset": category,
            "source": "offline",
            "question": question,
            "answer_type": rules.NUMBER if fact.answer.isdigit() else rules.TEXT,
        }
    assert len({row["extra_info"]["question"] for row in rows}) == len(rows)


def test_answer_types_are_given_where_inference_would_misread_the_answer():
    assert offline.answer_type("A") == rules.TEXT  # inferred: a multiple-choice letter
    assert offline.answer_type("false") == rules.TEXT  # inferred: a boolean
    assert offline.answer_type("1440") == rules.NUMBER


@pytest.mark.parametrize("split", outputs.SPLITS)
def test_policy_questions_are_the_sft_questions_of_the_split(small, split):
    policy = {row["extra_info"]["question"] for row in read(small, f"policy/{split}.parquet")}
    sft = {row["messages"][0]["content"] for row in read(small, f"sft/{split}.parquet")}
    assert policy == sft


def test_split_by_fact_no_val_or_eval_fact_in_train(small):
    def facts(rows):
        return {row["extra_info"]["prompt_id"] for row in rows}

    train, val = facts(read(small, "policy/train.parquet")), facts(read(small, "policy/val.parquet"))
    eval_facts = {
        f"{QUESTIONS[row['prompt']][0]}/{QUESTIONS[row['prompt']][1].key}" for row in read(small, outputs.EVAL_FILE)
    }
    assert train and val
    assert not train & val and not train & eval_facts and not val & eval_facts


def test_the_held_out_questions_are_the_eval_prompts(small):
    """policy/test.parquet asks the eval set's questions, in its order: facts no judge and no policy trained on."""
    test = read(small, "policy/test.parquet")
    evaluated = read(small, outputs.EVAL_FILE)
    assert [row["extra_info"]["question"] for row in test] == [row["prompt"] for row in evaluated]
    for row in test:
        category, fact, _ = QUESTIONS[row["extra_info"]["question"]]
        assert row["reward_model"]["ground_truth"] == fact.answer
        assert row["extra_info"]["prompt_id"] == f"{category}/{fact.key}"
        assert row["extra_info"]["split"] == "test"


def test_same_seed_gives_identical_files_and_another_seed_differs(small, tmp_path):
    offline.generate(tmp_path / "again", SMALL)
    offline.generate(tmp_path / "other", offline.OfflineConfig(200, 40, 50, seed=4))
    for name in POLICY_FILES:
        assert (small / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
        assert (small / name).read_bytes() != (tmp_path / "other" / name).read_bytes(), name


@pytest.mark.parametrize("name", POLICY_FILES)
def test_rlhf_dataset_loads_every_row(small, tiny_model_dir, tmp_path, name):
    rows = read(small, name)
    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 64,
            "truncation": "error",
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "return_raw_chat": True,
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    dataset = RLHFDataset(str(small / name), AutoTokenizer.from_pretrained(tiny_model_dir), config)
    assert len(dataset) == len(rows) > 0  # nothing filtered: every question fits 64 tokens with the template
    for index, row in enumerate(rows):
        item = dataset[index]
        assert item["raw_prompt"] == [dict(m) for m in row["prompt"]]
        assert item["data_source"] == offline.DATA_SOURCE_POLICY
        assert item["reward_model"]["ground_truth"] == row["reward_model"]["ground_truth"]
        assert item["extra_info"] == row["extra_info"]


def test_the_reward_adapter_reads_the_rows_and_its_rule_fallback_can_score_them(small):
    """With no judge answering, every row is still scored by the rules from its ground truth and answer
    type: the fact's answer stated scores 1, a wrong one 0."""
    rows = read(small, "policy/val.parquet")
    right = [f"The answer is {row['reward_model']['ground_truth']}." for row in rows]
    wrong = [f"The answer is {QUESTIONS[row['extra_info']['question']][1].wrong[0]}." for row in rows]
    scores = verl_reward.compute_score_batch(
        [row["data_source"] for row in rows] * 2,
        right + wrong,
        [row["reward_model"]["ground_truth"] for row in rows] * 2,
        [row["extra_info"] for row in rows] * 2,
        judge_url=f"http://127.0.0.1:{free_port()}",
        max_retries=0,
    )
    assert {score["source"] for score in scores} == {"rule_fallback"}
    assert [score["score"] for score in scores] == [1.0] * len(rows) + [0.0] * len(rows)
