import json

import pytest

from judge_rewards.protocol.judge_spec import JudgeSpec, kind_from_architectures, load_judge_spec


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
    ],
)
def test_invalid_specs_name_the_file(tmp_path, content, message):
    (tmp_path / "judge.json").write_text(json.dumps(content))
    with pytest.raises(ValueError, match=message):
        load_judge_spec(tmp_path)


def test_missing_directory_contents(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        load_judge_spec(tmp_path)
