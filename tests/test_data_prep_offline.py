"""The offline dataset: deterministic, disjoint between splits, and good vs flawed only in substance."""

import json
from collections import Counter

import pandas as pd
import pytest

from data_prep import cli, offline, outputs
from data_prep.offline_facts import CATEGORIES
from data_prep.records import UsageError
from evaluation.data import load_rows as load_eval_rows
from judge_rewards.protocol import templates

SMALL = offline.OfflineConfig(train_size=200, val_size=40, eval_size=50, seed=3)
FILES = [
    outputs.split_file(dataset, split)
    for dataset in (outputs.SFT, outputs.BRADLEY_TERRY, outputs.POINTWISE, outputs.PAIRWISE)
    for split in outputs.SPLITS
]
FILES.append(outputs.EVAL_FILE)
# question text -> (category, fact, phrasing): every question the generator can ask
QUESTIONS = {
    fact.question(phrasing): (category.name, fact, phrasing)
    for category in CATEGORIES
    for fact in category.facts
    for phrasing in fact.phrasings
}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("offline")
    offline.generate(out, SMALL)
    return out


def read(out, name):
    return pd.read_parquet(out / name).to_dict("records")


def question_in(judge_prompt: str) -> str:
    return judge_prompt.split("## Conversation\n[User]\n", 1)[1].split("\n\n## ", 1)[0]


def questions(out, split):
    """Every question asked in a split, whatever the dataset."""
    found = {row["messages"][0]["content"] for row in read(out, f"sft/{split}.parquet")}
    found |= {json.loads(row["chosen"])[0]["content"] for row in read(out, f"bradley_terry/{split}.parquet")}
    for dataset in ("grpo/pointwise", "grpo/pairwise"):
        found |= {question_in(row["prompt"][0]["content"]) for row in read(out, f"{dataset}/{split}.parquet")}
    return found


def test_question_texts_are_unique_across_facts():
    assert len(QUESTIONS) == sum(len(f.phrasings) for c in CATEGORIES for f in c.facts)


def test_every_fact_has_three_distinct_wrong_answers_of_its_kind():
    for category in CATEGORIES:
        for fact in category.facts:
            assert len(set(fact.wrong)) == len(fact.wrong) >= offline.FLAWED_PER_EVAL_PROMPT, fact.key
            assert fact.answer not in fact.wrong, fact.key


def test_same_seed_gives_identical_files_and_another_seed_differs(small, tmp_path):
    offline.generate(tmp_path / "again", SMALL)
    offline.generate(tmp_path / "other", offline.OfflineConfig(200, 40, 50, seed=4))
    for name in FILES:
        assert (small / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
    other = tmp_path / "other" / "bradley_terry" / "train.parquet"
    assert (small / "bradley_terry" / "train.parquet").read_bytes() != other.read_bytes()


def test_val_and_eval_questions_and_facts_never_appear_in_train(small):
    train, val = questions(small, "train"), questions(small, "val")
    eval_rows = read(small, outputs.EVAL_FILE)
    eval_questions = {row["prompt"] for row in eval_rows}
    assert train and val and eval_questions
    assert not train & val and not train & eval_questions and not val & eval_questions

    def facts(questions_):
        return {(QUESTIONS[q][0], QUESTIONS[q][1].key) for q in questions_}

    train_facts, val_facts, eval_facts = facts(train), facts(val), facts(eval_questions)
    assert not train_facts & val_facts and not train_facts & eval_facts and not val_facts & eval_facts


def test_sizes_are_honoured(small):
    for split, size in (("train", SMALL.train_size), ("val", SMALL.val_size)):
        for dataset in (outputs.BRADLEY_TERRY, outputs.POINTWISE, outputs.PAIRWISE):
            assert len(read(small, outputs.split_file(dataset, split))) == size
    assert len(read(small, outputs.EVAL_FILE)) == SMALL.eval_size


def test_bradley_terry_pairs_differ_only_in_the_answer(small):
    for row in read(small, "bradley_terry/train.parquet"):
        chosen, rejected = json.loads(row["chosen"]), json.loads(row["rejected"])
        assert [m["role"] for m in chosen] == [m["role"] for m in rejected] == ["user", "assistant"]
        assert chosen[0] == rejected[0]
        _, fact, phrasing = QUESTIONS[chosen[0]["content"]]
        assert chosen[1]["content"] == fact.statement(phrasing, fact.answer)
        assert rejected[1]["content"] in {fact.statement(phrasing, wrong) for wrong in fact.wrong}
        assert row["margin"] == offline.MARGIN


def test_answer_length_gives_nothing_away(small):
    rows = read(small, "bradley_terry/train.parquet")
    lengths = [(len(json.loads(r["chosen"])[1]["content"]), len(json.loads(r["rejected"])[1]["content"])) for r in rows]
    longer_wins = sum(1.0 if c > r else 0.5 if c == r else 0.0 for c, r in lengths) / len(lengths)
    assert 0.4 < longer_wins < 0.6


def test_sft_rows_are_the_good_answers_of_distinct_train_questions(small):
    rows = [[dict(m) for m in row["messages"]] for row in read(small, "sft/train.parquet")]
    assert len({json.dumps(r) for r in rows}) == len(rows)
    for user, assistant in rows:
        _, fact, phrasing = QUESTIONS[user["content"]]
        assert assistant == {"role": "assistant", "content": fact.statement(phrasing, fact.answer)}
    bt_questions = {json.loads(r["chosen"])[0]["content"] for r in read(small, "bradley_terry/train.parquet")}
    assert {user["content"] for user, _ in rows} == bt_questions


def test_pointwise_grades_are_balanced_and_match_the_response(small):
    rows = read(small, "grpo/pointwise/train.parquet")
    scores = Counter()
    for index, row in enumerate(rows):
        content = row["prompt"][0]["content"]
        question = question_in(content)
        category, fact, phrasing = QUESTIONS[question]
        response = content.split("## Response to rate\n", 1)[1].split("\n\n" + templates.POINTWISE_ANSWER_FORMAT)[0]
        score = templates.read_ground_truth(row["reward_model"]["ground_truth"])["score"]
        good = fact.statement(phrasing, fact.answer)
        flawed = {fact.statement(phrasing, wrong) for wrong in fact.wrong}
        expected = {
            4: response == good,
            3: response == good + offline.UNSURE_SUFFIX,
            2: response.startswith("I am not sure which is right: ")
            and f'"{good}"' in response
            and any(f'"{f}"' in response for f in flawed),
            1: response == offline.NO_ANSWER,
            0: response in flawed,
        }
        assert expected[score], (score, response)
        assert [dict(m) for m in row["prompt"]] == templates.pointwise_messages(question, response)
        assert row["data_source"] == "offline/pointwise"
        assert row["extra_info"] == {
            "split": "train",
            "index": index,
            "prompt_id": f"{category}/{fact.key}",
            "subset": category,
            "source": "offline",
        }
        scores[score] += 1
    assert scores == dict.fromkeys(range(5), SMALL.train_size // 5)


def test_pairwise_positions_are_balanced_and_labelled(small):
    rows = read(small, "grpo/pairwise/val.parquet")
    labels = Counter()
    for row in rows:
        question = question_in(row["prompt"][0]["content"])
        _, fact, phrasing = QUESTIONS[question]
        good = fact.statement(phrasing, fact.answer)
        better = templates.read_ground_truth(row["reward_model"]["ground_truth"])["better"]
        flawed = next(
            fact.statement(phrasing, w)
            for w in fact.wrong
            if fact.statement(phrasing, w) in row["prompt"][0]["content"]
        )
        a, b = (good, flawed) if better == "A" else (flawed, good)
        assert [dict(m) for m in row["prompt"]] == templates.pairwise_messages(question, a, b)
        labels[better] += 1
    assert labels == {"A": SMALL.val_size // 2, "B": SMALL.val_size // 2}


def test_eval_rows_follow_rewardbench2_with_one_correct_and_three_flawed(small):
    rows = read(small, outputs.EVAL_FILE)
    assert list(pd.read_parquet(small / outputs.EVAL_FILE).columns) == [*outputs.RB2_COLUMNS, "additional_metadata"]
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        category, fact, phrasing = QUESTIONS[row["prompt"]]
        assert row["subset"] == category
        assert list(row["chosen"]) == [fact.statement(phrasing, fact.answer)]
        assert len(set(row["rejected"])) == 3
        assert set(row["rejected"]) <= {fact.statement(phrasing, wrong) for wrong in fact.wrong}
        assert (row["num_correct"], row["num_incorrect"], row["total_completions"]) == (1, 3, 4)
        assert list(row["models"]) == [offline.EVAL_MODEL_NAME] * 4
        assert row["additional_metadata"] == {"category": category, "fact": fact.key}
    assert {row["subset"] for row in rows} == {category.name for category in CATEGORIES}


def test_eval_file_loads_with_the_project_evaluation(small):
    rows = load_eval_rows(small / outputs.EVAL_FILE)
    assert len(rows) == SMALL.eval_size and not any(row.is_ties for row in rows)


def test_too_large_a_size_is_a_clear_error(tmp_path):
    with pytest.raises(UsageError, match=r"^asked for 5000 eval prompts but the facts allow only \d+$"):
        offline.generate(tmp_path, offline.OfflineConfig(eval_size=5000))


def test_cli_writes_the_default_demo_dataset(tmp_path, capsys):
    cli.main(["offline", "--out", str(tmp_path)])
    first_line, *rest = capsys.readouterr().out.splitlines()
    assert first_line == f"offline (seed 0): wrote 3344 rows under {tmp_path}"
    assert rest == [
        "  bradley_terry/train.parquet       720 rows",
        "  bradley_terry/val.parquet          80 rows",
        "  eval/test.parquet                 100 rows",
        "  grpo/pairwise/train.parquet       720 rows",
        "  grpo/pairwise/val.parquet          80 rows",
        "  grpo/pointwise/train.parquet      720 rows",
        "  grpo/pointwise/val.parquet         80 rows",
        "  policy/train.parquet              377 rows",
        "  policy/val.parquet                 45 rows",
        "  sft/train.parquet                 377 rows",
        "  sft/val.parquet                    45 rows",
        "skipped: nothing",
    ]
