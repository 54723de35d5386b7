import math
from fractions import Fraction

import pytest

from judge_core.protocol.judge_api import (
    JudgeItem,
    MalformedAnswer,
    answer_text,
    item_answer,
    responses_by_request_id,
    scalar_text,
)


@pytest.mark.parametrize("body", [None, [], {"results": []}, {"responses": {"a": 1}}, {"responses": [1, 2]}])
def test_a_body_without_a_list_of_responses_is_malformed(body):
    with pytest.raises(MalformedAnswer, match="no list of responses"):
        responses_by_request_id(body)


def test_responses_are_found_by_request_id_first_one_wins():
    body = {
        "responses": [
            {"request_id": "b", "score": 0.2},
            {"request_id": "a", "score": 0.9},
            {"request_id": "b", "score": 0.7},
        ]
    }
    assert responses_by_request_id(body) == {
        "b": {"request_id": "b", "score": 0.2},
        "a": {"request_id": "a", "score": 0.9},
    }


@pytest.mark.parametrize(
    "response, error",
    [
        (None, "no result for request_id r1"),
        ({"score": None, "error": "unparsable judge answer"}, "unparsable judge answer"),
        ({"score": 0.5, "error": "judge failed"}, "judge failed"),  # an error wins over a score
        ({}, "no score and no error given"),
        ({"score": 1.7}, "invalid score 1.7"),
        ({"score": -0.1}, "invalid score -0.1"),
        ({"score": True}, "invalid score True"),
        ({"score": "0.5"}, "invalid score '0.5'"),
        ({"score": math.nan}, "invalid score nan"),
    ],
)
def test_an_item_without_a_valid_score_is_a_failure_never_a_zero(response, error):
    answer = item_answer(response, "r1")
    assert answer.score is None and answer.error == error


def test_a_scored_item_keeps_explanation_details_and_metadata():
    answer = item_answer(
        {"score": 1, "explanation": "ok", "detailed_scores": {"clarity": 0.5}, "metadata": {"raw_reward": 2.0}}, "r1"
    )
    assert (answer.score, answer.error, answer.explanation) == (1.0, None, "ok")
    assert answer.detailed_scores == {"clarity": 0.5} and answer.metadata == {"raw_reward": 2.0}


@pytest.mark.parametrize(
    "value, text",
    [
        ("4", "4"),
        ("", ""),
        (4, "4"),
        (-7, "-7"),
        (10**30, "1000000000000000000000000000000"),
        (10**400, "1" + "0" * 400),  # too large for a float
        (2.5, "2.5"),
        (4.0, "4"),  # what pandas makes of an integer column with a missing value
        (0.1, "0.1"),
        (1e20, "1e+20"),
        (True, "true"),
        (False, "false"),
        (Fraction(1, 4), "0.25"),
        (None, None),
    ],
)
def test_scalars_have_one_text_form(value, text):
    assert scalar_text(value, "answer") == text
    assert JudgeItem.create("q", "c", value).answer == text


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_non_finite_request_id_is_refused_naming_the_field(value):
    with pytest.raises(ValueError, match="request_id must be a finite number"):
        scalar_text(value, "request_id")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_answer_is_no_answer(value):
    assert answer_text(value) is None
    assert JudgeItem.create("q", "The answer is nan", value).answer is None


@pytest.mark.parametrize("value", [[4], {"value": 4}, ("a",), b"4", object()])
def test_a_non_scalar_answer_is_refused_naming_the_field(value):
    with pytest.raises(TypeError, match="answer must be a string, a number or a boolean, got"):
        JudgeItem.create("q", "c", value)


@pytest.mark.parametrize("request_id", [["a"], {"a": 1}, 7, None])
def test_a_response_whose_request_id_is_not_a_string_is_malformed(request_id):
    with pytest.raises(MalformedAnswer, match="request_id"):
        responses_by_request_id({"responses": [{"request_id": request_id, "score": 0.5}]})


def test_an_integer_score_too_large_for_a_float_is_invalid():
    answer = item_answer({"score": 10**400}, "r1")
    assert answer.score is None and answer.error.startswith("invalid score 1000")
