"""What the offline data says about its graded responses beyond the 0-4 grade: the short judge-format
answers a generative judge's SFT warm start trains on, and the synthetic HelpSteer2-style attributes.

The grades are those of `offline.graded_response`: 4 correct, 3 correct but needlessly unsure,
2 undecided between the correct and a wrong statement, 1 no answer, 0 confidently wrong.
"""

from __future__ import annotations

from data_prep.outputs import ATTRIBUTE_NAMES
from judge_core.protocol.templates import PAIRWISE_TIE, RECALLED_ANSWER_OPENING


def _think(reasoning: str) -> str:
    return f"<think>{reasoning}</think>"


def _pointwise_reasoning(score: int, answer: str, wrong: str) -> str:
    return {
        4: f"It answers {answer}, which is correct, and says it plainly.",
        3: f"It answers {answer}, which is correct, but adds needless doubt.",
        2: f"It offers both {answer} and {wrong} without choosing one.",
        1: f"It gives no answer; the answer is {answer}.",
        0: f"It answers {wrong}, but the correct answer is {answer}.",
    }[score]


# The openings of a value-first pointwise reasoning (`pointwise_answer`'s `value_first`): the value stated first,
# then the words that say whether the response's value agrees with it.
VALUE_FIRST_OPENINGS = {
    "reference": ("The reference says", "agrees", "disagrees"),
    "answer": (RECALLED_ANSWER_OPENING, "is correct", "is wrong"),
}


def _value_stated(opening: str, value: str, working: str | None) -> str:
    """`opening` and `value` ("The correct answer is 22"), after the working that gives the value where there is one
    ("3 + 19 = 22, so the correct answer is 22")."""
    if working:
        return f"{working}, so {opening[0].lower()}{opening[1:]} {value}"
    return f"{opening} {value}"


def _value_first_reasoning(value_first: str, score: int, answer: str, wrong: str, working: str | None) -> str:
    opening, agrees, disagrees = VALUE_FIRST_OPENINGS[value_first]
    said = {
        4: f"it answers {answer}, which {agrees}, and says it plainly.",
        3: f"it answers {answer}, which {agrees}, but adds needless doubt.",
        2: f"it offers both {answer} and {wrong} without choosing one.",
        1: "it gives no answer.",
        0: f"it answers {wrong}, which {disagrees}.",
    }[score]
    return f"{_value_stated(opening, answer, working)}; {said}"


def pointwise_answer(
    score: int, answer: str, wrong: str, value_first: str | None = None, working: str | None = None
) -> str:
    """A pointwise judge's answer to the graded response of a fact whose answer is `answer`, `wrong` being
    the wrong value that the flawed statement (grades 0 and 2) gives. `value_first` (a VALUE_FIRST_OPENINGS key):
    the reasoning opens with a value before the response's, so that the verdict comes right after the two values
    it compares. "reference": the reference's value, shown in the prompt; "answer" (no reference shown): the
    correct answer, recalled before the response is judged. None: the reasoning starts from the response.
    `working` (with a value first): how that value is worked out, written before it ("17 + 5 = 22, so ...")."""
    if value_first is None:
        reasoning = _pointwise_reasoning(score, answer, wrong)
    else:
        reasoning = _value_first_reasoning(value_first, score, answer, wrong, working)
    return _think(reasoning) + f"<score>{score}</score>"


def pairwise_answer(
    good_is_a: bool, answer: str, wrong: str, answer_first: bool = False, working: str | None = None
) -> str:
    """A pairwise judge's answer to a correct statement against a confidently wrong one. The reasoning takes A
    then B, whichever is right, so each verdict word follows the value it judges: naming the better response
    first would put the whole decision on the reasoning's first token, before the judge has read anything.
    `answer_first`: the reasoning opens with the correct answer, so that the judge's decision is which value to
    recall (the same in both orders), and each verdict compares a response's value with the recalled one.
    `working` (with `answer_first`): how that answer is worked out, written before it."""
    good = "A" if good_is_a else "B"
    said = {letter: (answer, "correct") if letter == good else (wrong, "wrong") for letter in ("A", "B")}
    return _pairwise_answer(said, good, answer, answer_first, working)


def pairwise_tie_answer(
    answer: str, wrongs: tuple[str, str] | None = None, answer_first: bool = False, working: str | None = None
) -> str:
    """A pairwise judge's answer to two statements of the same fact, both correct or (`wrongs`: the values A and B
    say) both wrong, so the verdict is tie (`answer_first` and `working` as in `pairwise_answer`)."""
    said = {letter: (answer, "correct") for letter in ("A", "B")}
    if wrongs is not None:
        said = {letter: (value, "wrong") for letter, value in zip(("A", "B"), wrongs, strict=True)}
    return _pairwise_answer(said, PAIRWISE_TIE, answer, answer_first, working)


def _pairwise_answer(said: dict, verdict: str, answer: str, answer_first: bool, working: str | None) -> str:
    reasoning = "; ".join(f"Response {letter} says {value}, which is {word}" for letter, (value, word) in said.items())
    if answer_first:
        reasoning = f"{_value_stated(VALUE_FIRST_OPENINGS['answer'][0], answer, working)}; {reasoning}"
    return _think(reasoning + ".") + f"<better>{verdict}</better>"


# Synthetic attribute rules (data_prep/README.md explains them); keys are the grades.
_CORRECTNESS = {4: 4, 3: 4, 2: 2, 1: 1, 0: 0}  # right value stated; both; none; a wrong one
_COHERENCE = {4: 4, 3: 3, 2: 1, 1: 4, 0: 4}  # doubt after a plain claim costs 1, two rival claims cost 3
# What it takes to produce the answer: recall a name or word, state a quantity, compute.
_COMPLEXITY_BY_CATEGORY = {"capitals": 1, "opposites": 1, "general": 1, "units": 2, "arithmetic": 3}
# Verbosity from the response's word count: at most 5 words is 0, 6-8 is 1, 9-12 is 2, 13-18 is 3, more is 4.
_VERBOSITY_WORD_LIMITS = ((5, 0), (8, 1), (12, 2), (18, 3))


def _complexity(score: int, category: str) -> int:
    if score == 1:
        return 0  # no answer: nothing worked out
    return min(4, _COMPLEXITY_BY_CATEGORY[category] + (score == 2))  # weighing two candidates adds 1


def _verbosity(response: str) -> int:
    words = len(response.split())
    return next((level for limit, level in _VERBOSITY_WORD_LIMITS if words <= limit), 4)


def attributes(score: int, category: str, response: str) -> dict[str, float]:
    """The five attributes of a graded response (each 0-4): helpfulness is the grade, correctness and
    coherence follow the grade, complexity the kind of question (and indecision), verbosity the length."""
    values = {
        "helpfulness": score,
        "correctness": _CORRECTNESS[score],
        "coherence": _COHERENCE[score],
        "complexity": _complexity(score, category),
        "verbosity": _verbosity(response),
    }
    return {name: float(values[name]) for name in ATTRIBUTE_NAMES}
