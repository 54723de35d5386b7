"""The GRPO reward functions: format failures never score as predictions, rewards fall with distance,
adversarial answers cannot earn more than an honest one, and every sample reports the same keys."""

import re

import pytest

from judge_core.grpo_rewards import (
    FORMAT_FAILURE_REWARD,
    MISSING_THINK_PENALTY,
    REWARD_KEYS,
    compute_pairwise_score,
    compute_pointwise_recall_score,
    compute_pointwise_score,
)
from judge_core.protocol import templates


def pointwise(answer: str, label: int) -> dict:
    return compute_pointwise_score("offline", answer, templates.pointwise_ground_truth(label))


def recall(answer: str, label: int, correct: str = "22") -> dict:
    return compute_pointwise_recall_score("offline", answer, templates.pointwise_ground_truth(label, correct))


def pairwise(answer: str, label: str) -> dict:
    return compute_pairwise_score("offline", answer, templates.pairwise_ground_truth(label))


def scored(value, think: str | None = "The response is correct and complete.", tag: str = "score") -> str:
    reasoning = "" if think is None else f"<think>{think}</think>"
    return f"{reasoning}<{tag}>{value}</{tag}>"


POINTWISE_FORMAT_FAILURES = {
    "empty": "",
    "no answer tag": "<think>It is fine.</think>",
    "plain number": "3",
    "two tags": scored(3) + "<score>4</score>",
    "two tags, same value": scored(3) + "<score>3</score>",
    "tag only inside think": "<think>maybe <score>3</score></think>",
    "think never closed": "<think>thinking <score>3</score>",
    "above range": scored(5),
    "below range": scored(-1),
    "huge number": scored(10**20),
    "not an integer": scored("3.5"),
    "a word": scored("three"),
    "a range": scored("2-3"),
    "full-width digit": scored("\uff13"),
    "plus sign": scored("+3"),
    "leading zero": scored("03"),
    "negative zero": scored("-0"),
    "ideographic space": scored("\u30003"),
    "stray closing tag": scored(3) + "</score>",
    "tag in a second, open think block": "<think>ok</think><think>hmm <score>3</score>",
    "unclosed tag": "<think>ok</think><score>3",
    "ground truth echoed": '<think>ok</think>{"score": 3}',
    "huge junk": "x" * 1_000_000,
    "huge number of tags": "<think>ok</think>" + "<score>3</score>" * 10_000,
}

PAIRWISE_FORMAT_FAILURES = {
    "empty": "",
    "no answer tag": "<think>A is better.</think>",
    "bare letter": "A",
    "both letters": scored("A", tag="better") + "<better>B</better>",
    "hedged": scored("A or B", tag="better"),
    "lower case": scored("a", tag="better"),
    "full-width letter": scored("\uff21", tag="better"),
    "Cyrillic letter": scored("\u0410", tag="better"),
    "ideographic space": scored("\u3000A", tag="better"),
    "stray closing tag": scored("A", tag="better") + "</better>",
    "tag only inside think": "<think><better>A</better></think>",
    "think never closed": "<think>so <better>A</better>",
    "ground truth echoed": '<think>ok</think>{"better": "A"}',
    "huge junk": "<think>" + "B" * 1_000_000,
}


@pytest.mark.parametrize("answer", POINTWISE_FORMAT_FAILURES.values(), ids=POINTWISE_FORMAT_FAILURES.keys())
@pytest.mark.parametrize("label", [0, 3])
def test_pointwise_format_failures_get_the_lowest_reward(answer, label):
    reward = pointwise(answer, label)
    assert reward["score"] == FORMAT_FAILURE_REWARD
    assert reward["format_ok"] == 0.0 and reward["accuracy"] == 0.0


@pytest.mark.parametrize("answer", PAIRWISE_FORMAT_FAILURES.values(), ids=PAIRWISE_FORMAT_FAILURES.keys())
@pytest.mark.parametrize("label", ["A", "B"])
def test_pairwise_format_failures_get_the_lowest_reward(answer, label):
    reward = pairwise(answer, label)
    assert reward["score"] == FORMAT_FAILURE_REWARD
    assert reward["format_ok"] == 0.0 and reward["accuracy"] == 0.0


def test_a_parse_failure_is_not_a_prediction_of_zero():
    """The anchor recipe's hole: an unparsable answer scored as 0 earned full reward on 0-labelled rows."""
    assert pointwise("I cannot tell.", 0)["score"] < pointwise(scored(4), 0)["score"]


@pytest.mark.parametrize("label", range(5))
def test_pointwise_reward_falls_with_distance(label):
    rewards = [pointwise(scored(prediction), label)["score"] for prediction in range(5)]
    distances = [abs(prediction - label) for prediction in range(5)]
    by_distance = [reward for _, reward in sorted(zip(distances, rewards, strict=True))]
    assert by_distance == sorted(by_distance, reverse=True)
    assert len(set(zip(distances, rewards, strict=True))) == len(set(distances))  # one reward per distance
    assert rewards[label] == 1.0 and min(rewards) > FORMAT_FAILURE_REWARD


def test_reward_ordering_exact_near_far_then_wrong_format():
    label = 0
    exact, near, far = (pointwise(scored(prediction), label)["score"] for prediction in (0, 1, 4))
    far_without_think = pointwise(scored(4, think=None), label)["score"]
    wrong_format = pointwise(scored(0) + "<score>0</score>", label)["score"]
    assert exact > near > far > far_without_think > wrong_format


def test_missing_think_is_a_milder_flaw_than_being_wrong():
    label = 1
    with_think, without_think = pointwise(scored(1), label), pointwise(scored(1, think=None), label)
    near_with_think = pointwise(scored(2), label)
    assert without_think["score"] == pytest.approx(with_think["score"] - MISSING_THINK_PENALTY)
    assert with_think["score"] > without_think["score"] > near_with_think["score"]
    assert without_think["format_ok"] == 1.0 and without_think["think_ok"] == 0.0
    assert without_think["accuracy"] == 1.0


def test_empty_think_block_counts_as_reasoning():
    assert pointwise("<think></think><score>3</score>", 3)["think_ok"] == 1.0


@pytest.mark.parametrize(
    "reasoning",
    ["</think>", "It is right.</think>", "Sure. <think>It is right.</think>", "<think>a</think><think>b</think>"],
)
def test_the_think_credit_needs_a_well_formed_think_block(reasoning):
    """A bare </think> (or any other broken block) still delimits the answer, but earns no think credit."""
    reward = pointwise(reasoning + "<score>3</score>", 3)
    assert (reward["format_ok"], reward["accuracy"], reward["think_ok"]) == (1.0, 1.0, 0.0)
    assert reward["score"] == pytest.approx(1.0 - MISSING_THINK_PENALTY)
    assert pairwise(reasoning + "<better>A</better>", "A")["think_ok"] == 0.0


def test_only_the_answer_after_the_reasoning_counts():
    """A tag inside <think> is reasoning, not an answer, whatever it says."""
    answer = "<think>Some would say <score>4</score>, but no.</think><score>1</score>"
    assert pointwise(answer, 4)["accuracy"] == 0.0
    assert pointwise(answer, 1)["accuracy"] == 1.0


@pytest.mark.parametrize("label, other", [("A", "B"), ("B", "A")])
def test_pairwise_rewards_the_right_letter_and_has_no_position_preference(label, other):
    right, wrong = pairwise(scored(label, tag="better"), label), pairwise(scored(other, tag="better"), label)
    assert (right["score"], right["accuracy"]) == (1.0, 1.0)
    assert (wrong["score"], wrong["accuracy"]) == (0.0, 0.0)
    assert wrong["score"] > FORMAT_FAILURE_REWARD
    assert pairwise(scored(label, think=None, tag="better"), label)["score"] == 1.0 - MISSING_THINK_PENALTY


def test_whitespace_around_the_value_is_accepted():
    assert pointwise("<think>ok</think>\n<score> 3 </score>\n", 3)["accuracy"] == 1.0
    assert pairwise("<think>ok</think> <better>\nB\n</better>", "B")["accuracy"] == 1.0


def test_every_sample_reports_the_same_numeric_keys():
    samples = [pointwise(answer, 2) for answer in POINTWISE_FORMAT_FAILURES.values()]
    samples += [pointwise(scored(p, think=t), 2) for p in range(5) for t in ("ok", None)]
    samples += [pairwise(answer, "A") for answer in PAIRWISE_FORMAT_FAILURES.values()]
    samples += [pairwise(scored(x, think=t, tag="better"), "A") for x in "AB" for t in ("ok", None)]
    for reward in samples:
        assert tuple(reward) == REWARD_KEYS
        assert all(type(value) is float for value in reward.values())


@pytest.mark.parametrize(
    "function, ground_truth",
    [
        (compute_pointwise_score, templates.pairwise_ground_truth("A")),
        (compute_pairwise_score, templates.pointwise_ground_truth(3)),
    ],
)
def test_ground_truth_of_the_other_mode_is_a_data_error(function, ground_truth):
    with pytest.raises(ValueError, match="mixed up"):
        function("offline", scored(3), ground_truth)


@pytest.mark.parametrize(
    "ground_truth, message",
    [
        ("3", "ground truth '3' is neither"),
        ('{"score": 7}', "pointwise label 7 is not an integer in 0..4"),
        ("not json", "ground truth 'not json' is not JSON"),
        (None, "ground truth None is not JSON"),
    ],
)
def test_invalid_ground_truth_raises_instead_of_scoring(ground_truth, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        compute_pointwise_score("offline", scored(3), ground_truth)


WORKED = "<think>3 + 19 = {}, so the correct answer is {}; it answers 12, which is wrong.</think><score>0</score>"


@pytest.mark.parametrize(
    ("answer", "score", "accuracy", "recall_ok"),
    [
        ("<think>The correct answer is 22; it answers 12, which is wrong.</think><score>0</score>", 1.0, 1.0, 1.0),
        (WORKED.format(22, 22), 1.0, 1.0, 1.0),
        ("<think>The correct answer is 22; it answers 12, plainly.</think><score>1</score>", 0.75, 0.0, 1.0),
        # the right grade from a wrong recalled value earns what the farthest grade earns
        ("<think>The correct answer is 13; it answers 12, which is wrong.</think><score>0</score>", 0.0, 1.0, 0.0),
        (WORKED.format(21, 21), 0.0, 1.0, 0.0),
        ("<think>It answers 12, which is wrong.</think><score>0</score>", 0.0, 1.0, 0.0),
        ("<score>0</score>", -MISSING_THINK_PENALTY, 1.0, 0.0),
        ("<think>The correct answer is 22; it answers 12.</think>", FORMAT_FAILURE_REWARD, 0.0, 1.0),
    ],
)
def test_the_recall_reward_pays_a_grade_only_from_the_right_recalled_answer(answer, score, accuracy, recall_ok):
    reward = recall(answer, label=0)
    assert (reward["score"], reward["accuracy"], reward["recall_ok"]) == (score, accuracy, recall_ok)
    assert tuple(reward) == (*REWARD_KEYS, "recall_ok") and all(type(v) is float for v in reward.values())


def test_the_recall_reward_reads_the_answer_as_the_data_writes_it():
    answer = "<think>The correct answer is blue Whale.</think><score>4</score>"
    assert recall(answer, label=4, correct="blue whale")["score"] == 1.0
    assert recall(answer, label=4, correct="whale")["score"] == 0.0


def test_an_answer_in_the_ground_truth_leaves_the_plain_reward_as_it_was():
    answer = "<think>The correct answer is 13; it answers 12, which is wrong.</think><score>1</score>"
    with_answer = compute_pointwise_score("offline", answer, templates.pointwise_ground_truth(0, "22"))
    assert with_answer == pointwise(answer, 0)


def test_the_recall_reward_needs_the_answer_in_the_ground_truth():
    with pytest.raises(ValueError, match="--pointwise-answer-first"):
        compute_pointwise_recall_score("offline", scored(3), templates.pointwise_ground_truth(3))
    with pytest.raises(ValueError, match="mixed up"):
        compute_pointwise_recall_score("offline", scored(3), templates.pairwise_ground_truth("A"))
