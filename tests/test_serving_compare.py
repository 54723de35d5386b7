"""/compare and /batch_compare beyond the scalar server's own tests (test_serving_scalar.py): judges that
cannot compare are refused before anything is queued, the API key guards both routes, and a scalar judge
compares raw rewards, not its calibrated scores."""

from __future__ import annotations

import math
import os
import shutil

import httpx
import pytest

from judge_core.protocol.judge_spec import JudgeSpec
from judge_models.config import JudgeConfig
from serving.judges import ComparisonItem, JudgeItem, load_judge
from serving.judges.generative import GenerativeJudge
from serving.judges.scalar import ScalarJudge
from tests.support.servers import start_server
from tests.test_serving_scalar import assert_clean_shutdown, metric_value

API_KEY = "compare-secret"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
COMPARISON = {"prompt": "What is 2+2?", "response_a": "4", "response_b": "5"}


@pytest.fixture(scope="module")
def rule_server(tmp_path_factory):
    running = start_server(
        ["--judge", "rule"],
        log_path=tmp_path_factory.mktemp("compare_rule_server") / "server.log",
        env={**os.environ, "JUDGE_SERVER_API_KEY": API_KEY},
    )
    yield running
    assert_clean_shutdown(running)


@pytest.mark.parametrize("path, body", [("/compare", COMPARISON), ("/batch_compare", {"requests": [COMPARISON]})])
def test_a_rule_judge_refuses_comparisons_before_queueing(rule_server, path, body):
    batches_before = metric_value(rule_server.url, "judge_batch_size_count", headers=AUTH)
    response = httpx.post(f"{rule_server.url}{path}", json=body, headers=AUTH)
    assert response.status_code == 400
    assert response.json()["detail"] == f"{path} needs a pairwise or scalar judge; this server hosts a rule judge"
    assert metric_value(rule_server.url, "judge_batch_size_count", headers=AUTH) == batches_before


@pytest.mark.parametrize("path", ["/compare", "/batch_compare"])
def test_comparisons_need_the_api_key(rule_server, path):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = httpx.post(f"{rule_server.url}{path}", json=COMPARISON, headers=headers)
        assert response.status_code == 401 and "API key" in response.text


def test_only_judges_that_implement_compare_batch_can_compare():
    """can_compare depends on the class alone, so judges are made here without loading a model."""
    assert load_judge(JudgeConfig(judge="rule")).can_compare is False
    assert object.__new__(GenerativeJudge).can_compare is False  # a pointwise generative judge
    assert object.__new__(ScalarJudge).can_compare is True


def test_a_scalar_judge_compares_raw_rewards_not_calibrated_scores(tiny_scalar_judge_dir, tmp_path):
    """With reward_scale 0.25 the calibrated scores' log-odds differ by 4 (r_a - r_b); the comparison must
    be the Bradley-Terry probability of the raw rewards, sigmoid(r_a - r_b)."""
    model_dir = shutil.copytree(tiny_scalar_judge_dir, tmp_path / "calibrated")
    JudgeSpec(kind="scalar", reward_center=1.0, reward_scale=0.25).save(model_dir)
    judge = load_judge(JudgeConfig(model=str(model_dir)))
    prompt, response_a, response_b = "Name a colour", "Blue, the colour of a clear sky", "no"
    judged = judge.score_batch([JudgeItem(prompt, response_a), JudgeItem(prompt, response_b)])
    raw_a, raw_b = (verdict.metadata["raw_reward"] for verdict in judged)
    assert abs(raw_a - raw_b) > 1e-3, "the test needs distinguishable rewards"
    (verdict,) = judge.compare_batch([ComparisonItem(prompt, response_a, response_b)])
    assert verdict.score == pytest.approx(1 / (1 + math.exp(raw_b - raw_a)), abs=1e-6)
    assert (verdict.metadata["raw_reward_a"], verdict.metadata["raw_reward_b"]) == pytest.approx((raw_a, raw_b))
