import json

import pytest

from judge_core.protocol.judge_spec import (
    HELPSTEER2_ATTRIBUTE_WEIGHTS,
    JudgeSpec,
    kind_from_architectures,
    load_judge_spec,
    parse_attribute_weights,
)
from tests.conftest import REPO_ROOT

# The default attribute weights as the multi-aspect README documents them (and experiments/serving/LOG.md's recorded
# response shows them), written out: compared with the constant itself, a wrong constant would pass.
DOCUMENTED_WEIGHTS = {
    "helpfulness": 0.3,
    "correctness": 0.74,
    "coherence": 0.46,
    "complexity": 0.47,
    "verbosity": -0.33,
}


def test_scalar_probability_is_a_shifted_scaled_sigmoid():
    spec = JudgeSpec(kind="scalar", reward_center=2.0, reward_scale=0.5)
    assert spec.scalar_probability(2.0) == 0.5
    assert spec.scalar_probability(2.5) == pytest.approx(0.7310585786)
    assert spec.scalar_probability(-1e6) == 0.0 and spec.scalar_probability(1e6) == 1.0


def test_save_and_load_roundtrip(tmp_path):
    spec = JudgeSpec(kind="generative", prompt_format="pairwise", trained_with={"recipe": "grpo-pairwise"})
    spec.save(tmp_path)
    assert load_judge_spec(tmp_path) == spec


def test_kind_inferred_from_config_when_no_spec(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForSequenceClassification"]}))
    assert load_judge_spec(tmp_path).kind == "scalar"
    assert kind_from_architectures(["Qwen2ForCausalLM"]) == "generative"
    assert kind_from_architectures(["BertModel"]) is None


@pytest.mark.parametrize(
    "content, message",
    [
        ({"kind": "oracle"}, "not one of"),
        ({"kind": "generative", "prompt_format": "listwise"}, "prompt_format"),
        ({"kind": "scalar", "reward_scale": 0}, "positive"),
        ({"kind": "scalar", "bogus": 1}, "invalid judge spec"),
        ({"kind": "generative", "reference_in_prompts": 1}, "reference_in_prompts must be true, false or null"),
        ({"kind": "scalar", "reference_in_prompts": True}, "reference_in_prompts is for pointwise generative"),
        ({"kind": "generative", "prompt_format": "pairwise", "reference_in_prompts": False}, "is for pointwise"),
    ],
)
def test_invalid_specs_name_the_file(tmp_path, content, message):
    (tmp_path / "judge.json").write_text(json.dumps(content))
    with pytest.raises(ValueError, match=message):
        load_judge_spec(tmp_path)


def test_missing_directory_contents(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        load_judge_spec(tmp_path)


ATTRIBUTES = ["helpfulness", "verbosity"]


def test_an_attribute_judge_round_trips(tmp_path):
    spec = JudgeSpec(kind="scalar", attributes=ATTRIBUTES, attribute_weights={"helpfulness": 1, "verbosity": -0.5})
    spec.save(tmp_path)
    assert load_judge_spec(tmp_path) == spec


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"attributes": ATTRIBUTES, "attribute_weights": {"kindness": 1}}, "names 'kindness', which is not one of"),
        ({"attributes": ATTRIBUTES, "attribute_weights": {"helpfulness": "1"}}, r"\['helpfulness'\] must be a finite"),
        ({"attributes": ATTRIBUTES, "attribute_weights": {"helpfulness": float("nan")}}, "must be a finite number"),
        ({"attributes": ATTRIBUTES, "attribute_weights": {"helpfulness": 0}}, "at least one attribute a non-zero"),
        ({"attributes": ATTRIBUTES, "attribute_weights": {}}, "at least one attribute a non-zero"),
        ({"attributes": ["a", "a"], "attribute_weights": {"a": 1}}, "attributes must be unique"),
        ({"attributes": "helpfulness", "attribute_weights": {}}, "attributes must be a list of names"),
        ({"attribute_weights": {"helpfulness": 1}}, "attribute_weights without attributes"),
        (
            {"kind": "generative", "attributes": ATTRIBUTES},
            "attributes are for scalar judges; this judge is generative",
        ),
    ],
)
def test_invalid_attributes_name_the_file_and_the_field(tmp_path, fields, message):
    (tmp_path / "judge.json").write_text(json.dumps({"kind": "scalar", **fields}))
    with pytest.raises(ValueError, match=f"judge.json: invalid judge spec: .*{message}"):
        load_judge_spec(tmp_path)


def test_attribute_weights_parse_from_the_flag_syntax():
    assert parse_attribute_weights(" helpfulness = 0.5 ,verbosity=-1", ATTRIBUTES) == {
        "helpfulness": 0.5,
        "verbosity": -1.0,
    }


def test_the_default_attribute_weights_are_the_documented_ones():
    from training.attributes import score_weights

    assert HELPSTEER2_ATTRIBUTE_WEIGHTS == DOCUMENTED_WEIGHTS
    assert score_weights(list(DOCUMENTED_WEIGHTS), None) == DOCUMENTED_WEIGHTS  # what an export writes by default
    readme = (REPO_ROOT / "cookbooks" / "training_judge_model" / "multi-aspect" / "README.md").read_text()
    shown = ", ".join(f"{name} {weight}".replace("-", "\N{MINUS SIGN}") for name, weight in DOCUMENTED_WEIGHTS.items())
    assert shown in " ".join(readme.split())
