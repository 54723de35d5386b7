"""The rule-based scorer shared by the judge server's `rule` judge and the adapter's fallback."""

from __future__ import annotations

import threading

import pytest

from judge_core.rules import (
    ANSWER_TYPES,
    NoReferenceAnswer,
    last_boxed,
    resolve_answer_type,
    score_answer,
)


def score(completion, answer, answer_type=None) -> float:
    return score_answer(completion, answer, answer_type).score


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("The answer is **boxed{4}**", "4", 1.0),  # the seed's own example
        ("so \\boxed{4}", "4", 1.0),
        ("so \\boxed{4.0}", "4", 1.0),
        ("Total: \\boxed{1,000}", "1000", 1.0),
        ("\\boxed{\\$12}", "12", 1.0),
        ("\\boxed{50\\%}", "50", 1.0),
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{10^6}", "1000000", 1.0),
        ("\\boxed{\\sqrt{16}}", "4", 1.0),  # not "the number 16"
        ("\\boxed{x = 5}", "5", 1.0),
        ("\\boxed{3 or 4}", "3", 0.0),  # a hedge is not an answer
        ("\\boxed{3, 4}", "3", 0.0),
        ("First \\boxed{5}, no wait: \\boxed{4}", "4", 1.0),  # the last box counts
        ("The answer is 42.", "42", 1.0),
        ("Answer: -3.5 because of the sign", "-3.5", 1.0),
        ("The answer is 3 or 4", "3", 0.0),
        ("2 + 2 makes 4", "4", 1.0),  # last number
        ("4 is what I get after 7 steps", "4", 0.0),  # last number is 7
        ("1e-3", "0.001", 1.0),
        ("\\boxed{3/4}", "0.75", 1.0),
        ("no number at all", "4", 0.0),
    ],
)
def test_number(completion, answer, expected):
    assert score(completion, answer, "NUMBER") == expected


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("Expanding gives \\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
        ("The final answer is $\\frac{3}{4}$. I hope it is correct.", "0.75", 1.0),
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", 1.0),
        ("\\boxed{\\{2, 1\\}}", "\\{1,2\\}", 1.0),
        ("\\boxed{x^2+1}", "(x+1)^2", 0.0),
        ("\\boxed{3 \\text{ or } 4}", "3", 0.0),
        ("\\boxed{\\pm 2}", "2", 0.0),
        ("I am not sure.", "x^2", 0.0),
    ],
)
def test_math_expressions(completion, answer, expected):
    assert score(completion, answer, "MATH_EXPRESSIONS") == expected


def test_math_refuses_astronomical_powers_off_the_main_thread():
    results = []
    worker = threading.Thread(
        target=lambda: results.append(score_answer("\\boxed{9^{9^{9}}}", "5", "MATH_EXPRESSIONS"))
    )
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert results[0].score == 0.0 and "too large" in results[0].explanation


def test_math_works_off_the_main_thread():
    results = []
    worker = threading.Thread(target=lambda: results.append(score("\\boxed{2x+2}", "2(x+1)", "MATH_EXPRESSIONS")))
    worker.start()
    worker.join(timeout=60)
    assert results == [1.0]


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("B", "B", 1.0),
        ("(B)", "B", 1.0),
        ("B.", "B", 1.0),
        ("**B**", "B", 1.0),
        ("b", "B", 1.0),
        ("B. Paris is the capital.", "B", 1.0),
        ("Answer: B", "B", 1.0),
        ("**Answer:** (c)", "C", 1.0),
        ("The answer is a bit unclear", "A", 0.0),  # a bare lowercase letter is prose
        ("The answer is (C) because A fails.", "C", 1.0),
        ("The answer is option c.", "C", 1.0),
        ("The answer is: I think B", "B", 0.0),  # "I think" is not choice I, and no choice follows
        ("The answer is A or B", "A", 0.0),  # hedge
        ("The answer is A, B", "A", 0.0),
        ("\\boxed{B}", "B", 1.0),
        ("\\boxed{\\text{B}}", "B", 1.0),
        ("\\boxed{A, B}", "A", 0.0),
        ("After checking, (D) is the only one that works.", "D", 1.0),
        ("(A) fails and (D) works", "D", 0.0),  # two choices mentioned: ambiguous
        ("(A) fails and (D) works", "A", 0.0),
        ("A. Paris\nB. London\nC. Rome", "A", 0.0),  # listing the options is not answering
        ("A cat sat on the mat.", "A", 0.0),  # an article, not a choice
        ("C", "(B)", 0.0),
        ("I think it's B", "B", 0.0),  # no marker, no form: the rule does not guess
    ],
)
def test_multiple_choice(completion, answer, expected):
    assert score(completion, answer, "MULTIPLE_CHOICE") == expected, score_answer(completion, answer, "MULTIPLE_CHOICE")


def test_multiple_choice_reference_must_be_a_letter():
    with pytest.raises(ValueError, match="not a choice letter"):
        score_answer("B", "Paris", "MULTIPLE_CHOICE")


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("Yes, because 2 is even.", "yes", 1.0),
        ("No, it is not true.", "no", 1.0),  # the first word decides, not the later "true"
        ("**True**", "yes", 1.0),
        ("The answer is: false", "False", 1.0),
        ("\\boxed{No}", "no", 1.0),
        ("The statement is true.", "true", 1.0),
        ("It could be yes or no.", "yes", 0.0),  # both polarities
        ("The answer is yes or no", "yes", 0.0),
        ("Maybe.", "yes", 0.0),
        ("Yes.", "no", 0.0),
    ],
)
def test_boolean(completion, answer, expected):
    assert score(completion, answer, "BOOLEAN") == expected


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("Paris", "paris", 1.0),
        ("The answer is: **Paris**.", "Paris", 1.0),
        ("\\boxed{\\text{Paris}}", "Paris", 1.0),
        ("the Eiffel Tower", "Eiffel tower", 1.0),
        ("Paris, Rome, Berlin, London", "Paris", 0.0),  # containing the reference is not enough
        ("It is Paris", "Paris", 1.0),  # the claim that ends the last sentence
        ("The capital of Spain is Madrid.", "Madrid", 1.0),
        ("The opposite of hot is cold.\nThe opposite of cold is hot.", "cold", 0.0),  # the last claim counts
        ("The capital of Spain is Madrid. It is a big city.", "Madrid", 0.0),
        ("The capital of Spain is not Madrid.", "Madrid", 0.0),
        ("The capital of Spain is Madrid or Barcelona.", "Madrid", 0.0),
        ("Madrid is the capital of Spain.", "Madrid", 0.0),  # only what follows "is" is claimed
        ("This is Sparta", "This is Sparta", 1.0),  # still the whole text
    ],
)
def test_text(completion, answer, expected):
    assert score(completion, answer, "TEXT") == expected


@pytest.mark.parametrize(
    "answer, expected_type",
    [
        ("4", "NUMBER"),
        ("-3.5", "NUMBER"),
        ("\\frac{1}{2}", "NUMBER"),
        ("\\boxed{4}", "NUMBER"),
        ("x^2+1", "MATH_EXPRESSIONS"),
        ("\\sqrt{2}", "MATH_EXPRESSIONS"),
        ("3x", "MATH_EXPRESSIONS"),
        ("B", "MULTIPLE_CHOICE"),
        ("(C)", "MULTIPLE_CHOICE"),
        ("yes", "BOOLEAN"),
        ("False", "BOOLEAN"),
        ("Paris", "TEXT"),
        ("New York City", "TEXT"),
    ],
)
def test_answer_type_is_inferred_from_the_reference(answer, expected_type):
    assert resolve_answer_type(answer, None) == expected_type
    assert score_answer("anything", answer).answer_type in ANSWER_TYPES


def test_result_names_the_resolved_type_and_explains():
    result = score_answer("The answer is **boxed{4}**", "4")
    assert (result.score, result.answer_type) == (1.0, "NUMBER")
    assert "boxed" in result.explanation and "matches" in result.explanation


def test_answer_type_is_case_insensitive_and_validated():
    assert score_answer("B", "B", "multiple_choice").answer_type == "MULTIPLE_CHOICE"
    with pytest.raises(ValueError, match="not one of"):
        score_answer("B", "B", "LETTERS")


@pytest.mark.parametrize("answer", [None, "", "   ", float("nan"), float("inf"), float("-inf")])
def test_no_reference_answer_is_explicit_not_a_zero(answer):
    with pytest.raises(NoReferenceAnswer, match=r"^(no|empty) reference answer: the rule-based scorer cannot judge"):
        score_answer(f"The answer is {answer}", answer)


@pytest.mark.parametrize(
    "completion, answer",
    [("The answer is 4", 4), ("The answer is 4", 4.0), ("The answer is 2.5", 2.5), ("Yes, it is.", True)],
)
def test_a_reference_answer_may_be_a_number_or_a_boolean(completion, answer):
    assert score(completion, answer) == 1.0


def test_completion_must_be_text():
    with pytest.raises(TypeError, match="^completion must be a string, got NoneType$"):  # the guard's own message
        score_answer(None, "4")


def test_last_boxed_balances_braces():
    assert last_boxed("x \\boxed{\\frac{1}{2}} y") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{1} then \\boxed{2}") == "2"
    assert last_boxed("unclosed \\boxed{1") is None
