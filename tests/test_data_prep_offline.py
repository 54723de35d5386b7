"""The offline dataset: deterministic, disjoint between splits, and good vs flawed only in substance."""

import dataclasses
import json
import math
from collections import Counter

import pandas as pd
import pyarrow.parquet as pq
import pytest

from data_prep import cli, offline, outputs
from data_prep.offline_facts import CATEGORIES
from data_prep.records import UsageError
from evaluation.data import load_rows as load_eval_rows
from judge_core import grpo_rewards
from judge_core.protocol import templates

SMALL = offline.OfflineConfig(train_size=200, val_size=40, eval_size=50, seed=3)
FILES = [
    outputs.split_file(dataset, split)
    for dataset in (
        outputs.SFT,
        outputs.BRADLEY_TERRY,
        outputs.POINTWISE,
        outputs.PAIRWISE,
        outputs.SFT_JUDGE_POINTWISE,
        outputs.SFT_JUDGE_PAIRWISE,
        outputs.ATTRIBUTES,
    )
    for split in outputs.SPLITS
]
FILES += [outputs.EVAL_FILE, outputs.EVAL_VAL_FILE]
EVAL_FILES = (outputs.EVAL_FILE, outputs.EVAL_VAL_FILE)
# the datasets with one row per preference pair of a split
FILES_PER_PAIR = (
    outputs.BRADLEY_TERRY,
    outputs.POINTWISE,
    outputs.PAIRWISE,
    outputs.SFT_JUDGE_POINTWISE,
    outputs.SFT_JUDGE_PAIRWISE,
    outputs.ATTRIBUTES,
)
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


def test_the_val_eval_file_asks_every_val_fact_once_and_no_other(small):
    asked = sorted(
        (QUESTIONS[row["prompt"]][0], QUESTIONS[row["prompt"]][1].key) for row in read(small, outputs.EVAL_VAL_FILE)
    )
    val_facts = [(c.name, fact.key) for c in CATEGORIES for fact in offline.split_facts(c, SMALL)["val"]]
    assert asked == sorted(val_facts)
    assert not {row["prompt"] for row in read(small, outputs.EVAL_VAL_FILE)} & questions(small, "train")


def test_more_val_rows_per_fact_keep_the_first_rows_and_draw_each_further_one_afresh(small, tmp_path):
    offline.generate(tmp_path, dataclasses.replace(SMALL, val_rows_per_fact=4))
    for path in small.rglob("*.parquet"):
        name = path.relative_to(small)
        if str(name) != outputs.EVAL_VAL_FILE:
            assert path.read_bytes() == (tmp_path / name).read_bytes(), name
    plain, wide = read(small, outputs.EVAL_VAL_FILE), read(tmp_path, outputs.EVAL_VAL_FILE)
    assert plain_rows(wide[: len(plain)]) == plain_rows(plain)
    assert len({row["id"] for row in wide}) == len(wide)
    draws: dict[tuple[str, str], set] = {}
    for row in wide:
        category, fact, phrasing = QUESTIONS[row["prompt"]]
        assert list(row["chosen"]) == [fact.statement(phrasing, fact.answer)]
        assert len(set(row["rejected"])) == offline.FLAWED_PER_EVAL_PROMPT
        assert set(row["rejected"]) <= {fact.statement(phrasing, wrong) for wrong in fact.wrong}
        draws.setdefault((category, fact.key), set()).add((phrasing, frozenset(row["rejected"])))
    val_facts = [(c, fact) for c in CATEGORIES for fact in offline.split_facts(c, SMALL)["val"]]
    for category, fact in val_facts:
        possible = len(fact.phrasings) * math.comb(len(fact.wrong), offline.FLAWED_PER_EVAL_PROMPT)
        assert len(draws[category.name, fact.key]) == min(4, possible)  # distinct draws, as many as the fact allows
        asked = {phrasing for phrasing, _ in draws[category.name, fact.key]}
        assert len(asked) == min(4, len(fact.phrasings))  # the phrasings in turn
    assert sum(len(rows) for rows in draws.values()) == len(wide)
    general = [row for row in wide if row["subset"] == "general"]
    assert len(general) == len([row for row in plain if row["subset"] == "general"])  # one draw per general fact


def test_sizes_are_honoured(small):
    for split, size in (("train", SMALL.train_size), ("val", SMALL.val_size)):
        for dataset in FILES_PER_PAIR:
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


def test_hard_negatives_add_bradley_terry_pairs_and_change_nothing_else(small, tmp_path):
    offline.generate(tmp_path, dataclasses.replace(SMALL, hard_negatives=True))
    files = sorted(path.relative_to(small) for path in small.rglob("*.parquet"))
    assert files == sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*.parquet"))
    for name in files:
        if name.parts[0] != outputs.BRADLEY_TERRY:
            assert (small / name).read_bytes() == (tmp_path / name).read_bytes(), name
    for split in ("train", "val"):
        plain, hard = read(small, f"bradley_terry/{split}.parquet"), read(tmp_path, f"bradley_terry/{split}.parquet")
        assert hard[: len(plain)] == plain
        added = [(json.loads(r["chosen"]), json.loads(r["rejected"])[1]["content"]) for r in hard[len(plain) :]]
        asked = {chosen[0]["content"] for chosen, _ in added}
        assert asked == {json.loads(r["chosen"])[0]["content"] for r in plain}  # every question of the split
        for chosen, rejected in added:
            question = chosen[0]["content"]
            _, fact, phrasing = QUESTIONS[question]
            assert chosen[1]["content"] == fact.statement(phrasing, fact.answer)
            echoes = {fact.statement(phrasing, str(v)) for v in fact.slots.values()}
            assert rejected == question or rejected in echoes - {chosen[1]["content"]}
        rejected_answers = [rejected for _, rejected in added]
        assert sum(r in asked for r in rejected_answers) == len(asked)  # each question asked back once


def test_both_orders_give_every_pairwise_row_again_with_its_answers_swapped(small, tmp_path):
    offline.generate(tmp_path, dataclasses.replace(SMALL, both_orders=True))
    files = sorted(path.relative_to(small) for path in small.rglob("*.parquet"))
    swapped = {outputs.PAIRWISE, outputs.SFT_JUDGE_PAIRWISE}
    for name in files:
        if str(name.parent) not in swapped:
            assert (small / name).read_bytes() == (tmp_path / name).read_bytes(), name
    for split in ("train", "val"):
        plain, both = read(small, f"grpo/pairwise/{split}.parquet"), read(tmp_path, f"grpo/pairwise/{split}.parquet")
        assert plain_rows(both[::2]) == plain_rows(plain) and len(both) == 2 * len(plain)  # drawn order, then swap
        for drawn, swap in zip(both[::2], both[1::2], strict=True):
            letters = {drawn["reward_model"]["ground_truth"], swap["reward_model"]["ground_truth"]}
            assert letters == {templates.pairwise_ground_truth("A"), templates.pairwise_ground_truth("B")}
            assert question_in(drawn["prompt"][0]["content"]) == question_in(swap["prompt"][0]["content"])
            assert responses_of(drawn) == responses_of(swap)[::-1]
        sft_plain = read(small, f"sft_judge_pairwise/{split}.parquet")
        sft_both = read(tmp_path, f"sft_judge_pairwise/{split}.parquet")
        assert plain_rows(sft_both[::2]) == plain_rows(sft_plain) and len(sft_both) == 2 * len(sft_plain)


def test_pointwise_reference_adds_a_correct_reference_to_every_pointwise_judge_prompt(small, tmp_path):
    offline.generate(tmp_path, dataclasses.replace(SMALL, pointwise_reference=True))
    changed = {outputs.POINTWISE, outputs.SFT_JUDGE_POINTWISE}
    for name in sorted(path.relative_to(small) for path in small.rglob("*.parquet")):
        if str(name.parent) not in changed:
            assert (small / name).read_bytes() == (tmp_path / name).read_bytes(), name
    for split in ("train", "val"):
        for dataset, prompt_of in (
            ("grpo/pointwise", lambda row: row["prompt"][0]["content"]),
            ("sft_judge_pointwise", lambda row: row["messages"][0]["content"]),
        ):
            plain, guided = read(small, f"{dataset}/{split}.parquet"), read(tmp_path, f"{dataset}/{split}.parquet")
            assert len(plain) == len(guided)
            for plain_row, guided_row in zip(plain, guided, strict=True):
                before, reference = prompt_of(guided_row).split("\n\n## Reference answer\n", 1)
                reference, answer_format = reference.split("\n\n", 1)
                assert before + "\n\n" + answer_format == prompt_of(plain_row)  # the same row, plus its reference
                _, fact, phrasing = QUESTIONS[question_in(prompt_of(guided_row))]
                assert reference == offline.reference_answer(fact, phrasing) and fact.answer in reference
                if dataset == "grpo/pointwise":
                    assert guided_row["reward_model"] == plain_row["reward_model"]
                else:
                    assert guided_row["messages"][1] == plain_row["messages"][1]  # the same demonstration


@pytest.mark.parametrize(
    ("options", "opening", "verdicts"),
    [
        ({"pointwise_reference": True, "reference_first": True}, "The reference says", ("agrees", "disagrees")),
        ({"pointwise_answer_first": True}, "The correct answer is", ("is correct", "is wrong")),
    ],
)
def test_value_first_demonstrations_state_the_correct_value_before_the_response_value(
    tmp_path, options, opening, verdicts
):
    plain = dataclasses.replace(SMALL, pointwise_reference=options.get("pointwise_reference", False))
    offline.generate(tmp_path / "plain", plain)
    offline.generate(tmp_path / "first", dataclasses.replace(SMALL, **options))
    # with the answer first, grpo/pointwise's ground truths carry the answer (the next test)
    changed = {outputs.SFT_JUDGE_POINTWISE} | ({outputs.POINTWISE} if "pointwise_answer_first" in options else set())
    for name in sorted(path.relative_to(tmp_path / "plain") for path in (tmp_path / "plain").rglob("*.parquet")):
        if str(name.parent) not in changed:
            assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "first" / name).read_bytes(), name
    agrees, disagrees = verdicts
    for split in outputs.SPLITS:
        file = outputs.split_file(outputs.SFT_JUDGE_POINTWISE, split)
        for plain_row, row in zip(read(tmp_path / "plain", file), read(tmp_path / "first", file), strict=True):
            prompt, answer = user_and_answer(row)
            assert prompt == user_and_answer(plain_row)[0]
            parsed, plain = templates.parse_pointwise(answer), templates.parse_pointwise(user_and_answer(plain_row)[1])
            assert parsed.ok and parsed.value == plain.value
            _, fact, _ = QUESTIONS[question_in(prompt[0]["content"])]
            assert parsed.reasoning.startswith(f"{opening} {fact.answer}; it "), parsed.reasoning
            verdict = {4: f"which {agrees}", 3: f"which {agrees}", 0: f"which {disagrees}"}.get(parsed.value)
            assert verdict is None or verdict in parsed.reasoning, parsed.reasoning


def test_answer_first_ground_truths_carry_the_answer_each_demonstration_recalls(small, tmp_path):
    offline.generate(tmp_path, dataclasses.replace(SMALL, pointwise_answer_first=True, arithmetic_working=True))
    for split in outputs.SPLITS:
        file = outputs.split_file(outputs.POINTWISE, split)
        plain_rows, rows = pq.read_table(small / file).to_pylist(), pq.read_table(tmp_path / file).to_pylist()
        demonstrations = read(tmp_path, outputs.split_file(outputs.SFT_JUDGE_POINTWISE, split))
        for plain, row, demonstration in zip(plain_rows, rows, demonstrations, strict=True):
            label = templates.read_ground_truth(plain["reward_model"]["ground_truth"])
            _, fact, _ = QUESTIONS[question_in(row["prompt"][0]["content"])]
            ground_truth = row["reward_model"]["ground_truth"]
            assert ground_truth == templates.pointwise_ground_truth(label["score"], fact.answer)
            assert {**row, "reward_model": plain["reward_model"]} == plain
            reward = grpo_rewards.compute_pointwise_recall_score(
                "offline", user_and_answer(demonstration)[1], ground_truth
            )
            assert (reward["score"], reward["recall_ok"]) == (1.0, 1.0), demonstration


@pytest.mark.parametrize(
    ("answer_first", "demonstrations"),
    [("pointwise_answer_first", outputs.SFT_JUDGE_POINTWISE), ("pairwise_answer_first", outputs.SFT_JUDGE_PAIRWISE)],
)
def test_arithmetic_working_writes_the_computation_before_the_correct_answer(tmp_path, answer_first, demonstrations):
    plain_options = dataclasses.replace(SMALL, **{answer_first: True})
    offline.generate(tmp_path / "plain", plain_options)
    offline.generate(tmp_path / "worked", dataclasses.replace(plain_options, arithmetic_working=True))
    for path in (tmp_path / "plain").rglob("*.parquet"):
        name = path.relative_to(tmp_path / "plain")
        if name.parent.name != demonstrations:
            assert path.read_bytes() == (tmp_path / "worked" / name).read_bytes(), name
    worked_rows = 0
    for split in ("train", "val"):
        name = outputs.split_file(demonstrations, split)
        for plain, worked in zip(read(tmp_path / "plain", name), read(tmp_path / "worked", name), strict=True):
            assert plain["messages"][0] == worked["messages"][0]
            category, fact, _ = QUESTIONS[question_in(plain["messages"][0]["content"])]
            before, after = plain["messages"][1]["content"], worked["messages"][1]["content"]
            if category != "arithmetic":
                assert after == before
                continue
            a, op, b, _, result = fact.working.split()
            assert {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op] == int(result)
            assert result == fact.answer
            opening = "<think>The correct answer is"
            assert after == before.replace(opening, f"<think>{fact.working}, so the correct answer is", 1) != before
            worked_rows += 1
    assert worked_rows > 0


def test_pairwise_answer_first_demonstrations_open_with_the_correct_answer(small, tmp_path):
    offline.generate(tmp_path, dataclasses.replace(SMALL, pairwise_answer_first=True))
    for name in sorted(path.relative_to(small) for path in small.rglob("*.parquet")):
        if str(name.parent) != outputs.SFT_JUDGE_PAIRWISE:
            assert (small / name).read_bytes() == (tmp_path / name).read_bytes(), name
    for split in outputs.SPLITS:
        file = outputs.split_file(outputs.SFT_JUDGE_PAIRWISE, split)
        for plain_row, row in zip(read(small, file), read(tmp_path, file), strict=True):
            prompt, answer = user_and_answer(row)
            plain_prompt, plain_answer = user_and_answer(plain_row)
            assert prompt == plain_prompt
            parsed, plain = templates.parse_pairwise(answer), templates.parse_pairwise(plain_answer)
            assert parsed.ok and parsed.value == plain.value
            _, fact, _ = QUESTIONS[question_in(prompt[0]["content"])]
            assert parsed.reasoning == f"The correct answer is {fact.answer}; {plain.reasoning}"


def grades_of(out, split: str) -> Counter:
    rows = read(out, outputs.split_file(outputs.POINTWISE, split))
    return Counter(templates.read_ground_truth(row["reward_model"]["ground_truth"])["score"] for row in rows)


@pytest.mark.parametrize(("share", "confident"), [(0.8, 160), (1.0, 200), (0.0, 0)])
def test_confident_share_sets_how_many_graded_rows_are_grades_0_and_4(small, tmp_path, share, confident):
    offline.generate(tmp_path, dataclasses.replace(SMALL, confident_share=share))
    changed = {outputs.POINTWISE, outputs.SFT_JUDGE_POINTWISE, outputs.ATTRIBUTES}
    for name in sorted(path.relative_to(small) for path in small.rglob("*.parquet")):
        if str(name.parent) not in changed:
            assert (small / name).read_bytes() == (tmp_path / name).read_bytes(), name
    grades = grades_of(tmp_path, "train")
    assert grades[0] == grades[4] == confident // 2
    hedged = [grades[grade] for grade in (1, 2, 3)]
    assert sum(hedged) == SMALL.train_size - confident and max(hedged) - min(hedged) <= 1
    warm_start = read(tmp_path, outputs.split_file(outputs.SFT_JUDGE_POINTWISE, "train"))
    assert Counter(templates.parse_pointwise(user_and_answer(row)[1]).value for row in warm_start) == grades


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"reference_first": True}, "--reference-first needs --pointwise-reference"),
        ({"pointwise_answer_first": True, "pointwise_reference": True}, "with one, use --reference-first"),
        ({"confident_share": 1.5}, "--confident-share must be between 0 and 1, not 1.5"),
        ({"val_rows_per_fact": 0}, "--val-rows-per-fact must be at least 1, not 0"),
        ({"arithmetic_working": True}, "--arithmetic-working needs --pointwise-answer-first or --pairwise-answer-"),
    ],
)
def test_an_option_that_cannot_apply_is_refused(options, message):
    with pytest.raises(UsageError, match=message):
        dataclasses.replace(SMALL, **options)


def plain_rows(rows: list[dict]) -> list[str]:
    """Rows read from parquet (lists arrive as numpy arrays) as comparable JSON, without their row index."""
    return [
        json.dumps({**row, "extra_info": {**row.get("extra_info", {}), "index": None}}, default=list, sort_keys=True)
        for row in rows
    ]


def responses_of(row) -> list[str]:
    """The two responses a pairwise judge prompt shows, A then B."""
    after_a = row["prompt"][0]["content"].split("## Response A\n", 1)[1]
    a, after_b = after_a.split("\n\n## Response B\n", 1)
    return [a, after_b.split("\n\n", 1)[0]]


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


@pytest.mark.parametrize("eval_file", EVAL_FILES)
def test_eval_rows_follow_rewardbench2_with_one_correct_and_three_flawed(small, eval_file):
    rows = read(small, eval_file)
    columns = list(pd.read_parquet(small / eval_file).columns)
    assert columns == [*outputs.RB2_COLUMNS, "additional_metadata", "reference"]
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


@pytest.mark.parametrize("eval_file", EVAL_FILES)
def test_eval_references_are_correct_answers_phrased_unlike_the_chosen_one(small, eval_file):
    fallbacks = 0
    for row in read(small, eval_file):
        _, fact, phrasing = QUESTIONS[row["prompt"]]
        others = [fact.statement(p, fact.answer) for p in fact.phrasings if p != phrasing]
        assert row["reference"] != row["chosen"][0]
        if others:
            assert row["reference"] in others
        else:
            assert row["reference"] == f"The answer is {fact.answer}."
            fallbacks += 1
    assert 0 < fallbacks < len(read(small, eval_file)) / 2


@pytest.mark.parametrize("eval_file", EVAL_FILES)
def test_eval_files_load_with_the_project_evaluation(small, eval_file):
    rows = load_eval_rows(small / eval_file)
    assert rows and not any(row.is_ties for row in rows)
    assert len(rows) == SMALL.eval_size or eval_file == outputs.EVAL_VAL_FILE


def test_too_large_a_size_is_a_clear_error(tmp_path):
    with pytest.raises(UsageError, match=r"^asked for 5000 eval prompts but the facts allow only \d+$"):
        offline.generate(tmp_path, offline.OfflineConfig(eval_size=5000))


def test_cli_writes_the_default_demo_dataset(tmp_path, capsys):
    cli.main(["offline", "--out", str(tmp_path)])
    first_line, *rest = capsys.readouterr().out.splitlines()
    assert first_line == f"offline (seed 0): wrote 5910 rows under {tmp_path}"
    assert rest == [
        "  attributes/train.parquet               720 rows",
        "  attributes/val.parquet                  80 rows",
        "  bradley_terry/train.parquet            720 rows",
        "  bradley_terry/val.parquet               80 rows",
        "  eval/test.parquet                      100 rows",
        "  eval/val.parquet                        66 rows",
        "  grpo/pairwise/train.parquet            720 rows",
        "  grpo/pairwise/val.parquet               80 rows",
        "  grpo/pointwise/train.parquet           720 rows",
        "  grpo/pointwise/val.parquet              80 rows",
        "  policy/test.parquet                    100 rows",
        "  policy/train.parquet                   377 rows",
        "  policy/val.parquet                      45 rows",
        "  sft/train.parquet                      377 rows",
        "  sft/val.parquet                         45 rows",
        "  sft_judge_pairwise/train.parquet       720 rows",
        "  sft_judge_pairwise/val.parquet          80 rows",
        "  sft_judge_pointwise/train.parquet      720 rows",
        "  sft_judge_pointwise/val.parquet         80 rows",
        "skipped: nothing",
    ]


def grade_of(question: str, response: str) -> int:
    """The grade of an offline graded response, read from its text as a reader would."""
    _, fact, phrasing = QUESTIONS[question]
    good = fact.statement(phrasing, fact.answer)
    if response == offline.NO_ANSWER:
        return 1
    if response.startswith("I am not sure which is right: "):
        return 2
    if response == good + offline.UNSURE_SUFFIX:
        return 3
    if response == good:
        return 4
    assert response in {fact.statement(phrasing, wrong) for wrong in fact.wrong}, response
    return 0


def user_and_answer(row) -> tuple[list[dict], str]:
    user, assistant = row["messages"]
    assert (user["role"], assistant["role"]) == ("user", "assistant")
    return [dict(user)], assistant["content"]


@pytest.mark.parametrize("split", outputs.SPLITS)
def test_pointwise_warm_start_answers_parse_to_the_grpo_labels(small, split):
    grpo = read(small, outputs.split_file(outputs.POINTWISE, split))
    warm_start = read(small, outputs.split_file(outputs.SFT_JUDGE_POINTWISE, split))
    assert len(warm_start) == len(grpo)
    for grpo_row, row in zip(grpo, warm_start, strict=True):
        judge_prompt, answer = user_and_answer(row)
        assert judge_prompt == [dict(m) for m in grpo_row["prompt"]]
        parsed = templates.parse_pointwise(answer)
        assert parsed.ok and parsed.has_think, answer
        assert parsed.value == templates.read_ground_truth(grpo_row["reward_model"]["ground_truth"])["score"]
        _, fact, _ = QUESTIONS[question_in(judge_prompt[0]["content"])]
        assert fact.answer in parsed.reasoning and 5 <= len(parsed.reasoning.split()) <= 15, parsed.reasoning
        assert answer == f"<think>{parsed.reasoning}</think><score>{parsed.value}</score>"


@pytest.mark.parametrize("split", outputs.SPLITS)
def test_pairwise_warm_start_answers_parse_to_the_grpo_labels(small, split):
    grpo = read(small, outputs.split_file(outputs.PAIRWISE, split))
    warm_start = read(small, outputs.split_file(outputs.SFT_JUDGE_PAIRWISE, split))
    assert len(warm_start) == len(grpo)
    labels = Counter()
    for grpo_row, row in zip(grpo, warm_start, strict=True):
        judge_prompt, answer = user_and_answer(row)
        assert judge_prompt == [dict(m) for m in grpo_row["prompt"]]
        parsed = templates.parse_pairwise(answer)
        assert parsed.ok and parsed.has_think, answer
        assert parsed.value == templates.read_ground_truth(grpo_row["reward_model"]["ground_truth"])["better"]
        _, fact, _ = QUESTIONS[question_in(judge_prompt[0]["content"])]
        assert f"Response {parsed.value} says {fact.answer}, which is correct" in parsed.reasoning
        assert parsed.reasoning.startswith("Response A says ") and "; Response B says " in parsed.reasoning
        assert len(parsed.reasoning.split()) <= 20, parsed.reasoning
        labels[parsed.value] += 1
    assert labels["A"] == len(grpo) // 2


def test_warm_start_reasoning_names_the_case_it_judges(small):
    """Not one canned sentence per grade: the reasoning names the values of its own question."""
    rows = read(small, "sft_judge_pointwise/train.parquet")
    reasonings = {templates.parse_pointwise(user_and_answer(row)[1]).reasoning for row in rows}
    assert len(reasonings) > len(rows) / 2


# The synthetic attribute rules of data_prep/README.md, by grade (helpfulness is the grade itself).
CORRECTNESS = {4: 4, 3: 4, 2: 2, 1: 1, 0: 0}
COHERENCE = {4: 4, 3: 3, 2: 1, 1: 4, 0: 4}
COMPLEXITY = {"capitals": 1, "opposites": 1, "general": 1, "units": 2, "arithmetic": 3}


def verbosity_of(words: int) -> int:
    return 0 if words <= 5 else 1 if words <= 8 else 2 if words <= 12 else 3 if words <= 18 else 4


@pytest.mark.parametrize("split", outputs.SPLITS)
def test_attributes_follow_the_documented_rules_from_what_the_response_shows(small, split):
    grpo = read(small, outputs.split_file(outputs.POINTWISE, split))
    rows = read(small, outputs.split_file(outputs.ATTRIBUTES, split))
    schema = pq.read_schema(small / outputs.split_file(outputs.ATTRIBUTES, split))
    assert [(f.name, str(f.type)) for f in schema] == [("conversation", "string")] + [
        (name, "double") for name in ("helpfulness", "correctness", "coherence", "complexity", "verbosity")
    ]
    for grpo_row, row in zip(grpo, rows, strict=True):
        (user, assistant) = json.loads(row["conversation"])
        question, response = user["content"], assistant["content"]
        assert [dict(m) for m in grpo_row["prompt"]] == templates.pointwise_messages(question, response)
        grade = grade_of(question, response)
        category = QUESTIONS[question][0]
        assert (row["helpfulness"], row["correctness"], row["coherence"]) == (
            grade,
            CORRECTNESS[grade],
            COHERENCE[grade],
        )
        assert row["complexity"] == (0 if grade == 1 else COMPLEXITY[category] + (grade == 2))
        assert row["verbosity"] == verbosity_of(len(response.split()))


def test_every_attribute_varies_and_each_carries_its_own_signal(small):
    table = pd.read_parquet(small / "attributes/train.parquet")[list(outputs.ATTRIBUTE_NAMES)]
    for name in outputs.ATTRIBUTE_NAMES:
        assert table[name].nunique() >= 3, name
    columns = [tuple(table[name]) for name in outputs.ATTRIBUTE_NAMES]
    assert len(set(columns)) == len(columns)  # no attribute is a copy of another
