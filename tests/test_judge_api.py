import math

import pytest

from judge_rewards.protocol.judge_api import MalformedAnswer, item_answer, responses_by_request_id


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
