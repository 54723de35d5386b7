"""The judge-answer parsers (judge_core.protocol.templates) and the GRPO reward functions
(judge_core.grpo_rewards) under a bounded property-based run; part of `python -m benchmarks.fuzz_api`.

Properties, for any input:
- parse_pointwise / parse_pairwise never raise; a Judgement is either ok with a value in range (an int in
  0..4; "A" or "B", and "tie" where the parser is given PAIRWISE_VERDICTS) or not ok with no value and a
  reason; has_think is a bool. A non-text input is a format failure, not an exception. A well-formed answer
  parses to exactly the value it holds.
- compute_pointwise_score / compute_pairwise_score return the REWARD_KEYS, each a float; a malformed answer
  gets FORMAT_FAILURE_REWARD, a well-formed one a score in [-MISSING_THINK_PENALTY, 1] (the exact closeness
  when the answer was built well-formed); a ground truth that is not a valid label raises ValueError and
  nothing else.
- compute_pointwise_recall_score does the same with `recall_ok` added, and pays the closeness only where
  recall_ok is 1: never for an answer that does not hold the ground truth's correct answer, always for one built
  to recall it in a think block (any case, padded, after working), never for one built to recall another
  value; `accuracy` stays the exact grade's. A ground truth without a correct answer raises ValueError.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from hypothesis import strategies as st

from benchmarks.reliability import Outcome, run_property
from judge_core import grpo_rewards
from judge_core.protocol import templates

ANSWER_PIECES = [
    "<think>",
    "</think>",
    "<score>",
    "</score>",
    "<better>",
    "</better>",
    "<think></think>",
    "<score>4</score>",
    "<better>A</better>",
    "<better>tie</better>",
    "The correct answer is ",
    "the correct answer is 22",
    ";",
    ".",
    "22",
    "Nairobi",
    "tie",
    "A",
    "B",
    "C",
    "a",
    " A ",
    *[str(n) for n in range(-2, 7)],
    "+3",
    "-0",
    "3.5",
    "1e1",
    "0004",
    "٣",  # a non-ASCII decimal digit
    "４",  # a full-width digit
    "",
    " ",
    "\n",
    "\x00",
    "🙂",
]
SCORES = range(templates.MIN_SCORE, templates.MAX_SCORE + 1)
PADDING = st.sampled_from(["", " ", "\n", " \n\t"])


def judge_answers() -> st.SearchStrategy[str]:
    """Text a judge might write: any unicode, and answers assembled from the format's own pieces."""
    pieces = st.one_of(st.sampled_from(ANSWER_PIECES), st.text(max_size=6))
    return st.one_of(st.text(max_size=200), st.lists(pieces, max_size=12).map("".join))


def reasoning() -> st.SearchStrategy[str]:
    return st.text(max_size=80).filter(lambda text: "</think>" not in text)


@st.composite
def well_formed(draw, tag: str, values) -> tuple[str, object, bool]:
    """(answer, the value it holds, whether it has a think block)."""
    value = draw(st.sampled_from(list(values)))
    with_think = draw(st.booleans())
    think = f"<think>{draw(reasoning())}</think>" if with_think else ""
    pad = [draw(PADDING) for _ in range(4)]
    return f"{pad[0]}{think}{pad[1]}<{tag}>{pad[2]}{value}{pad[3]}</{tag}>", value, with_think


NOT_TEXT = st.one_of(st.none(), st.integers(), st.floats(), st.binary(max_size=20), st.lists(st.text(), max_size=3))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
CORRECT_ANSWERS = ["22", "Nairobi", "hot", "-3.5", "٣"]
GROUND_TRUTHS = st.one_of(
    st.text(max_size=30),
    JSON_VALUES.map(json.dumps),
    st.fixed_dictionaries({"score": JSON_VALUES | st.integers(-2, 6)}).map(json.dumps),
    st.fixed_dictionaries({"better": JSON_VALUES | st.sampled_from(["A", "B", "C", "a"])}).map(json.dumps),
    st.fixed_dictionaries({"score": st.integers(-2, 6), "answer": JSON_VALUES | st.sampled_from(CORRECT_ANSWERS)}).map(
        json.dumps
    ),
    st.none(),
    st.integers(),
)


def check_judgement(judgement, allowed: set) -> list[str]:
    if not isinstance(judgement, templates.Judgement):
        return [f"returned {type(judgement).__name__}, not a Judgement"]
    problems = []
    if not isinstance(judgement.has_think, bool):
        problems.append(f"has_think is {judgement.has_think!r}")
    if judgement.ok:
        if isinstance(judgement.value, bool) or judgement.value not in allowed:
            problems.append(f"ok with value {judgement.value!r} outside {sorted(allowed, key=str)}")
    elif judgement.value is not None or not (isinstance(judgement.error, str) and judgement.error):
        problems.append(f"failed with value {judgement.value!r} and error {judgement.error!r}")
    return problems


def parser_check(parse: Callable, allowed: set, tag: str) -> Callable[[tuple], Outcome]:
    """Checks one (input kind, input) of a parser."""

    def check(case: tuple) -> Outcome:
        kind, value = case
        text, held, with_think = value if kind == "well-formed" else (value, None, None)
        try:
            judgement = parse(text)
        except Exception as err:  # the property under test: a parser never raises
            return Outcome(kind, f"raised {type(err).__name__}", [f"raised {type(err).__name__}: {err}"])
        problems = check_judgement(judgement, allowed)
        if kind == "well-formed" and (judgement.value, judgement.has_think) != (held, with_think):
            problems.append(f"well-formed <{tag}> holding {held!r} parsed as {judgement!r}")
        if kind == "not text" and judgement.ok:
            problems.append(f"non-text {text!r} parsed as {judgement!r}")
        return Outcome(kind, "ok" if judgement.ok else "format failure", problems)

    return check


def parser_inputs(tag: str, values) -> st.SearchStrategy[tuple]:
    return st.one_of(
        st.tuples(st.just("judge-like text"), judge_answers()),
        st.tuples(st.just("well-formed"), well_formed(tag, values)),
        st.tuples(st.just("not text"), NOT_TEXT),
    )


def reward_check(reward: Callable, problems_of: Callable) -> Callable[[tuple], Outcome]:
    """Checks one reward call: (kind, answer, ground truth, ...) with kind "any ground truth" where the ground truth
    may be invalid; `problems_of(result, answer, ground truth, ...)` lists the broken properties of a result."""

    def check(case: tuple) -> Outcome:
        kind, answer, ground_truth = case[:3]
        try:
            result = reward("fuzz", answer, ground_truth)
        except ValueError:
            problems = [] if kind == "any ground truth" else [f"ValueError for the valid label {ground_truth!r}"]
            return Outcome(kind, "ValueError (bad ground truth)", problems)
        except Exception as err:
            return Outcome(kind, f"raised {type(err).__name__}", [f"raised {type(err).__name__}: {err}"])
        return Outcome(kind, result_kind(result), problems_of(result, *case[1:]))

    return check


def result_kind(result) -> str:
    if not isinstance(result, dict):
        return "not a dict"
    kind = "format ok" if result.get("format_ok") == 1.0 else "format failure"
    if "recall_ok" in result:
        kind += ", recalled" if result["recall_ok"] == 1.0 else ", not recalled"
    return kind


def graded_problems(parse: Callable, closeness_for: Callable) -> Callable:
    """The properties of a reward that pays the closeness of the parsed verdict to the ground truth's label."""
    return lambda result, answer, ground_truth: reward_problems(result, parse(answer), closeness_for(ground_truth))


def reward_problems(
    result, judgement: templates.Judgement, closeness_of: Callable, keys: tuple = grpo_rewards.REWARD_KEYS
) -> list[str]:
    if not isinstance(result, dict) or set(result) != set(keys):
        return [f"returned {result!r}, not the keys {keys}"]
    if not all(type(value) is float and math.isfinite(value) for value in result.values()):
        return [f"non-float values in {result}"]
    flags = [key for key in keys if key != "score"]
    problems = [f"{key} is {result[key]}" for key in flags if result[key] not in (0, 1)]
    if result["format_ok"] != float(judgement.ok):
        problems.append(f"format_ok {result['format_ok']} but the parser says ok={judgement.ok}")
    if not judgement.ok and result["score"] != grpo_rewards.FORMAT_FAILURE_REWARD:
        problems.append(f"malformed answer scored {result['score']}")
    if judgement.ok:
        penalty = 0.0 if judgement.has_think else grpo_rewards.MISSING_THINK_PENALTY
        expected = closeness_of(judgement.value) - penalty
        if (
            not math.isclose(result["score"], expected)
            or not -grpo_rewards.MISSING_THINK_PENALTY <= result["score"] <= 1.0
        ):
            problems.append(f"score {result['score']} for {judgement!r}, expected {expected}")
    return problems


def pointwise_closeness(ground_truth: str) -> Callable:
    label = templates.read_ground_truth(ground_truth).get("score")
    return lambda value: 1.0 - abs(value - label) / (templates.MAX_SCORE - templates.MIN_SCORE)


def pairwise_closeness(ground_truth: str) -> Callable:
    label = templates.read_ground_truth(ground_truth).get("better")
    return lambda value: 1.0 if value == label else 0.0


RECALL_KEYS = (*grpo_rewards.REWARD_KEYS, "recall_ok")


def recall_reward_problems(result, answer, ground_truth: str, recalls: bool | None) -> list[str]:
    judgement = templates.parse_pointwise(answer)
    paid = isinstance(result, dict) and result.get("recall_ok") == 1.0
    problems = reward_problems(
        result, judgement, pointwise_closeness(ground_truth) if paid else (lambda value: 0.0), RECALL_KEYS
    )
    if problems:
        return problems
    truth = templates.read_ground_truth(ground_truth)
    if "answer" not in truth:
        return [f"scored the ground truth {ground_truth!r}, which holds no correct answer"]
    if paid and not (isinstance(answer, str) and truth["answer"].strip().casefold() in answer.casefold()):
        problems.append(f"recall_ok 1 for an answer that never states the correct answer {truth['answer']!r}")
    if recalls is not None and paid != recalls:
        problems.append(f"recall_ok {result['recall_ok']} for an answer built {'' if recalls else 'not '}to recall it")
    if judgement.ok and result["accuracy"] != float(judgement.value == truth["score"]):
        problems.append(
            f"accuracy {result['accuracy']} is not the exact grade's ({judgement.value} for {truth['score']})"
        )
    return problems


@st.composite
def recalling_answers(draw) -> tuple[str, str, bool]:
    """(answer, ground truth, whether the answer recalls the ground truth's correct answer): a well-formed pointwise
    answer whose reasoning states the correct answer as the recipe's data writes it, or another value."""
    correct = draw(st.sampled_from(CORRECT_ANSWERS))
    right = [correct, correct.upper(), f" {correct} ", f"{correct}."]
    wrong = [other for other in CORRECT_ANSWERS if other != correct] + [f"{correct}0", f"not {correct}", ""]
    recalls = draw(st.booleans())
    stated = draw(st.sampled_from(right if recalls else wrong))
    opening = draw(st.sampled_from([templates.RECALLED_ANSWER_OPENING, templates.RECALLED_ANSWER_OPENING.upper()]))
    working = draw(st.sampled_from(["", "3 + 19 = 22, so "]))
    rest = draw(st.sampled_from(["", f"; it answers {correct}, which is correct.", "; it answers 12, which is wrong."]))
    with_think = draw(st.booleans())
    reasoning = f"{working}{opening} {stated}{rest}"
    text = f"<think>{reasoning}</think>" if with_think else reasoning
    label = draw(st.sampled_from(SCORES))
    answer = f"{text}<score>{draw(st.sampled_from(SCORES))}</score>"
    return answer, templates.pointwise_ground_truth(label, correct), recalls and with_think


def recall_reward_inputs() -> st.SearchStrategy[tuple]:
    valid_labels = st.tuples(st.sampled_from(SCORES), st.sampled_from(CORRECT_ANSWERS)).map(
        lambda label: templates.pointwise_ground_truth(*label)
    )
    return st.one_of(
        recalling_answers().map(lambda case: ("recalling answer", *case)),
        reward_inputs("score", SCORES, valid_labels).map(lambda case: (*case, None)),
    )


def reward_inputs(tag: str, values, valid_labels: st.SearchStrategy[str]) -> st.SearchStrategy[tuple]:
    answers = st.one_of(judge_answers(), well_formed(tag, values).map(lambda answer: answer[0]))
    return st.one_of(
        st.tuples(st.just("valid label"), answers, valid_labels),
        st.tuples(st.just("any ground truth"), answers, GROUND_TRUTHS),
    )


def parser_targets(
    parse_pointwise: Callable = templates.parse_pointwise,
    parse_pairwise: Callable = templates.parse_pairwise,
    recall_reward: Callable = grpo_rewards.compute_pointwise_recall_score,
) -> dict[str, tuple]:
    """name -> (strategy, check) of every fuzzed function; the parsers and the recall reward can be swapped (tests
    use broken ones)."""

    def parse_pairwise_with_ties(text):
        return parse_pairwise(text, templates.PAIRWISE_VERDICTS)

    return {
        "parse_pointwise": (parser_inputs("score", SCORES), parser_check(parse_pointwise, set(SCORES), "score")),
        "parse_pairwise": (
            parser_inputs("better", templates.PAIRWISE_CHOICES),
            parser_check(parse_pairwise, set(templates.PAIRWISE_CHOICES), "better"),
        ),
        "compute_pointwise_score": (
            reward_inputs("score", SCORES, st.sampled_from(SCORES).map(templates.pointwise_ground_truth)),
            reward_check(
                grpo_rewards.compute_pointwise_score, graded_problems(templates.parse_pointwise, pointwise_closeness)
            ),
        ),
        "compute_pointwise_recall_score": (recall_reward_inputs(), reward_check(recall_reward, recall_reward_problems)),
        "parse_pairwise with ties": (
            parser_inputs("better", templates.PAIRWISE_VERDICTS),
            parser_check(parse_pairwise_with_ties, set(templates.PAIRWISE_VERDICTS), "better"),
        ),
        "compute_pairwise_score": (
            reward_inputs(
                "better",
                templates.PAIRWISE_VERDICTS,
                st.sampled_from(templates.PAIRWISE_VERDICTS).map(templates.pairwise_ground_truth),
            ),
            reward_check(
                grpo_rewards.compute_pairwise_score, graded_problems(parse_pairwise_with_ties, pairwise_closeness)
            ),
        ),
    }


def fuzz_parsers(examples: int, seed: int, targets: dict[str, tuple] | None = None) -> dict:
    """Per fuzzed function: inputs tried, counts by input kind and result, broken properties."""
    targets = parser_targets() if targets is None else targets
    return {name: run_property(strategy, check, examples, seed) for name, (strategy, check) in targets.items()}
