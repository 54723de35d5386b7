"""A multi-attribute scalar judge (one label per HelpSteer2 attribute) served for real: detailed_scores are
its predictions on the 0..4 scale mapped to [0, 1], the score combines them by judge.json's weights or by
--attribute-weights, /compare reads the weighted sums, and bad weights stop the server before it loads."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys

import httpx
import pytest

from judge_core.protocol import templates
from judge_core.protocol.judge_spec import HELPSTEER2_ATTRIBUTE_WEIGHTS, JudgeSpec
from judge_models.config import JudgeConfig
from serving.judges import JudgeItem, load_judge
from tests.reward_adapter_servers import make_system
from tests.support.models import build_attribute_judge
from tests.support.servers import PACKAGE_ROOT, start_server
from tests.test_serving_scalar import assert_clean_shutdown, varied_requests

ATTRIBUTES = list(HELPSTEER2_ATTRIBUTE_WEIGHTS)
FLAG_WEIGHTS = {"correctness": 1.0, "verbosity": -0.5}  # the other attributes weigh 0


@pytest.fixture(scope="module")
def attribute_judge_dir(tiny_model_dir, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("attribute_judge")
    return build_attribute_judge(tiny_model_dir, out_dir, HELPSTEER2_ATTRIBUTE_WEIGHTS)


@pytest.fixture(scope="module")
def server(attribute_judge_dir, tmp_path_factory):
    weights = ",".join(f"{name}={weight}" for name, weight in FLAG_WEIGHTS.items())
    running = start_server(
        ["--model", str(attribute_judge_dir), "--attribute-weights", weights, "--batch-timeout", "0.1"],
        log_path=tmp_path_factory.mktemp("attribute_server") / "server.log",
    )
    yield running
    assert_clean_shutdown(running)


def predictions_alone(model_dir, pairs: list[tuple[str, str]]) -> list[dict[str, float]]:
    """Each (prompt, response)'s five predictions, computed alone in this process."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    predictions = []
    for prompt, response in pairs:
        text = tokenizer.apply_chat_template(templates.conversation_messages(prompt, response), tokenize=False)
        with torch.inference_mode():
            inputs = tokenizer(text, add_special_tokens=False, return_tensors="pt")
            predictions.append(dict(zip(ATTRIBUTES, model(**inputs).logits[0].tolist(), strict=True)))
    return predictions


def expected_score(predictions: dict[str, float], weights: dict[str, float]) -> float:
    """The weighted attributes mapped to [0, 1] over the unit box, written out from the README's formula."""
    weighted = sum(w * min(max(predictions[name] / 4, 0), 1) for name, w in weights.items())
    lowest = sum(w for w in weights.values() if w < 0)
    return (weighted - lowest) / sum(abs(w) for w in weights.values())


def test_detailed_scores_are_the_predictions_on_the_unit_scale(server, attribute_judge_dir):
    requests = varied_requests(12, seed=7)
    expected = predictions_alone(attribute_judge_dir, [(r["prompt"], r["completion"]) for r in requests])
    values = [value for prediction in expected for value in prediction.values()]
    assert min(values) < 0 and max(values) > 4 and any(0 < v < 4 for v in values), "the test needs clamped values"
    responses = httpx.post(f"{server.url}/batch_judge", json={"requests": requests}, timeout=60).json()["responses"]
    for response, predictions in zip(responses, expected, strict=True):
        assert response["error"] is None
        assert response["detailed_scores"] == pytest.approx(
            {name: min(max(value / 4, 0.0), 1.0) for name, value in predictions.items()}, abs=1e-6
        )
        assert response["metadata"]["attribute_predictions"] == pytest.approx(predictions, abs=1e-5)


def test_the_flag_replaces_the_weights_and_attributes_left_out_weigh_zero(server, attribute_judge_dir):
    requests = varied_requests(6, seed=8)
    expected = predictions_alone(attribute_judge_dir, [(r["prompt"], r["completion"]) for r in requests])
    responses = httpx.post(f"{server.url}/batch_judge", json={"requests": requests}, timeout=60).json()["responses"]
    for response, predictions in zip(responses, expected, strict=True):
        assert response["score"] == pytest.approx(expected_score(predictions, FLAG_WEIGHTS), abs=1e-6)
        assert response["metadata"]["attribute_weights"] == {name: FLAG_WEIGHTS.get(name, 0.0) for name in ATTRIBUTES}


def test_the_reward_adapter_gets_the_weighted_score_and_the_attributes(server, attribute_judge_dir):
    prompt, completion = "Explain rain", "Water vapour condenses into drops that fall"
    (predictions,) = predictions_alone(attribute_judge_dir, [(prompt, completion)])
    with make_system(server.url, timeout=60.0, fallback_to_rule=False) as system:
        result = system.reward(prompt, completion)
    assert (result["source"], result["error"]) == ("judge", None)
    assert result["reward"] == pytest.approx(expected_score(predictions, FLAG_WEIGHTS), abs=1e-6)
    assert result["detailed_scores"] == pytest.approx(
        {name: min(max(value / 4, 0.0), 1.0) for name, value in predictions.items()}, abs=1e-6
    )


def test_compare_reads_the_weighted_sums_of_the_raw_predictions(server, attribute_judge_dir):
    prompt, response_a, response_b = "Explain rain", "Water vapour condenses into drops that fall", "it rains"
    predictions_a, predictions_b = predictions_alone(attribute_judge_dir, [(prompt, response_a), (prompt, response_b)])
    sum_a, sum_b = (sum(w * p[name] for name, w in FLAG_WEIGHTS.items()) for p in (predictions_a, predictions_b))
    body = httpx.post(
        f"{server.url}/compare", json={"prompt": prompt, "response_a": response_a, "response_b": response_b}
    ).json()
    assert body["error"] is None
    assert body["score"] == pytest.approx(1 / (1 + math.exp(sum_b - sum_a)), abs=1e-6)
    assert (body["metadata"]["raw_reward_a"], body["metadata"]["raw_reward_b"]) == pytest.approx((sum_a, sum_b))


def test_judge_json_weights_are_the_default(attribute_judge_dir):
    judge = load_judge(JudgeConfig(model=str(attribute_judge_dir)))
    pairs = [("Hi", "Hello there, how can I help?"), ("Sum 2 and 2", "4")]
    verdicts = judge.score_batch([JudgeItem(prompt, response) for prompt, response in pairs])
    for verdict, predictions in zip(verdicts, predictions_alone(attribute_judge_dir, pairs), strict=True):
        assert verdict.score == pytest.approx(expected_score(predictions, HELPSTEER2_ATTRIBUTE_WEIGHTS), abs=1e-6)
        assert verdict.metadata["attribute_weights"] == HELPSTEER2_ATTRIBUTE_WEIGHTS


@pytest.mark.parametrize(
    "flag, reason",
    [
        ("helpfulness", "'helpfulness' is not name=value"),
        ("helpfulness=high", "'high' is not a number"),
        ("kindness=1", "names 'kindness', which is not one of the attributes"),
        ("helpfulness=inf", "must be a finite number"),
        ("helpfulness=0,verbosity=0", "at least one attribute a non-zero weight"),
        ("helpfulness=1,helpfulness=2", "'helpfulness' is given twice"),
    ],
)
def test_bad_weights_are_refused_naming_the_bad_part(attribute_judge_dir, flag, reason):
    with pytest.raises(ValueError, match=f"--attribute-weights '{flag}': .*{reason}"):
        load_judge(JudgeConfig(model=str(attribute_judge_dir), attribute_weights=flag))


def test_bad_weights_stop_the_server_at_startup(attribute_judge_dir):
    command = [sys.executable, "-m", "serving", "--model", str(attribute_judge_dir), "--attribute-weights", "kind=1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=PACKAGE_ROOT)
    assert done.returncode != 0
    assert "cannot load the judge: --attribute-weights 'kind=1': attribute_weights names 'kind'" in done.stderr


def test_weights_need_an_attribute_judge(tiny_scalar_judge_dir):
    with pytest.raises(ValueError, match="--attribute-weights needs a multi-attribute judge"):
        load_judge(JudgeConfig(model=str(tiny_scalar_judge_dir), attribute_weights="helpfulness=1"))


def test_the_head_must_have_one_label_per_attribute(tiny_scalar_judge_dir, tmp_path):
    model_dir = shutil.copytree(tiny_scalar_judge_dir, tmp_path / "one_label")
    JudgeSpec(kind="scalar", attributes=ATTRIBUTES, attribute_weights=HELPSTEER2_ATTRIBUTE_WEIGHTS).save(model_dir)
    with pytest.raises(ValueError, match="the judge has 5 attributes in judge.json, the model has num_labels=1"):
        load_judge(JudgeConfig(model=str(model_dir)))
