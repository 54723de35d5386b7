"""Reward models trained elsewhere (HF sequence classifiers without judge.json), served on the transformers backend
over HTTP, score each conversation exactly as their authors do: the served raw reward is the model's own fp32
forward on `tokenizer.apply_chat_template(messages, tokenize=True)`, with one BOS where the chat template renders
it and the tokenizer would add it again, no activation, and with --truncation left the BOS and the conversation's
last tokens, reported per item. A multi-output head serves its outputs by its config's id2label names.

The models (tests/support/reward_models.py) are tiny random-init Llama (Llama 3 template and tokenizer, both
adding <|begin_of_text|>), Qwen3 (ChatML, no BOS) and Gemma (<bos><start_of_turn>, both adding <bos>) sequence
classifiers. tests/frameworks/test_vllm_reward_models.py checks the same on the vLLM backend."""

from __future__ import annotations

import math

import httpx
import pytest
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from judge_core.protocol.judge_spec import JudgeSpec
from judge_models.config import JudgeConfig
from serving.judges import load_judge
from serving.judges.hf import bos_handling
from tests.support import reward_models
from tests.support.reward_models import (
    FAMILIES,
    LABELS,
    conversation,
    left_truncated_ids,
    reference_rewards,
    token_ids,
)
from tests.support.servers import batch_judge, start_server, started_together

pytestmark = pytest.mark.e2e

MAX_INPUT_TOKENS = 96
TOLERANCE = 1e-4  # fp32 on both sides; the packed and padded forwards differ from the single one by ~1e-6
# The multi-label head's weights: every output counts, with its own weight.
LABEL_WEIGHTS = {name: (index + 1) / 10 * (-1) ** index for index, name in enumerate(LABELS)}
SERVED = (*FAMILIES, "labels")


def weights_flag(weights: dict[str, float]) -> str:
    return ",".join(f"{name}={weight}" for name, weight in weights.items())


def server_flags(name: str, model_dir) -> list[str]:
    flags = ["--model", str(model_dir), "--dtype", "float32", "--max-input-tokens", str(MAX_INPUT_TOKENS)]
    flags += ["--truncation", "left", "--batch-timeout", "0.2"]
    return flags + (["--attribute-weights", weights_flag(LABEL_WEIGHTS)] if name == "labels" else [])


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("reward_models")
    dirs = {family: reward_models.build(family, root / family) for family in FAMILIES}
    dirs["labels"] = reward_models.build("llama3", root / "labels", seed=1, labels=LABELS)
    return dirs


@pytest.fixture(scope="module")
def servers(model_dirs, tmp_path_factory):
    logs = tmp_path_factory.mktemp("reward_model_servers")

    def start(name: str):
        return start_server(server_flags(name, model_dirs[name]), logs / f"{name}.log")

    with started_together(SERVED, start) as running:
        yield running


@pytest.mark.parametrize("family", FAMILIES)
def test_served_raw_reward_is_the_models_own_forward_on_its_chat_template(family, servers, model_dirs):
    requests = reward_models.requests()
    served = batch_judge(servers[family], requests)
    expected = reference_rewards(model_dirs[family], [conversation(r) for r in requests])
    for response, outputs in zip(served, expected, strict=True):
        assert response["error"] is None, response
        raw = response["metadata"]["raw_reward"]
        assert raw == pytest.approx(outputs[0], abs=TOLERANCE), response["request_id"]
        assert response["score"] == pytest.approx(1 / (1 + math.exp(-raw)), abs=1e-9)  # no judge.json: sigmoid
        assert response["metadata"]["truncated_tokens"] == 0
    # One request alone (padded forward, not packed with its siblings) reads the same reward.
    alone = httpx.post(f"{servers[family].url}/judge", json=requests[1], timeout=60).json()
    assert alone["metadata"]["raw_reward"] == pytest.approx(expected[1][0], abs=TOLERANCE)
    assert len({round(outputs[0], 2) for outputs in expected}) > len(expected) // 2  # not a constant head


@pytest.mark.parametrize("family", ["llama3", "gemma"])
def test_a_bos_both_template_and_tokenizer_add_is_read_once_and_said_at_load(family, servers, model_dirs):
    """The usage RLHFlow's and Skywork's model cards give (strip the template's BOS from the text, let the tokenizer
    add it) and apply_chat_template(tokenize=True) are the same one-BOS ids; tokenizing the template's text with
    the tokenizer's special tokens would read two, and score differently."""
    tokenizer = AutoTokenizer.from_pretrained(model_dirs[family])
    bos = tokenizer.bos_token
    requests = reward_models.requests()[:3]
    messages = [conversation(r) for r in requests]

    def stripped(tokenizer, messages):
        return tokenizer(tokenizer.apply_chat_template(messages, tokenize=False).removeprefix(bos))["input_ids"]

    def doubled(tokenizer, messages):
        return tokenizer(tokenizer.apply_chat_template(messages, tokenize=False))["input_ids"]

    assert [stripped(tokenizer, m) for m in messages] == [token_ids(tokenizer, m) for m in messages]
    assert doubled(tokenizer, messages[0])[:2] == [tokenizer.bos_token_id] * 2
    served = [r["metadata"]["raw_reward"] for r in batch_judge(servers[family], requests)]
    assert served == pytest.approx(
        [o[0] for o in reference_rewards(model_dirs[family], messages, stripped)], abs=TOLERANCE
    )
    twice = [o[0] for o in reference_rewards(model_dirs[family], messages, doubled)]
    assert all(abs(a - b) > 20 * TOLERANCE for a, b in zip(served, twice, strict=True))  # the test sees a double
    health = httpx.get(f"{servers[family].url}/health", timeout=30).json()
    assert health["tokenization"].startswith(f"duplicated BOS: the chat template renders {bos}")
    assert f"the judge reads one {bos}" in health["tokenization"]
    assert "duplicated BOS" in servers[family].log()  # logged at load


def test_bos_handling_names_each_case(model_dirs):
    def handling(family):
        return bos_handling(reward_models.build_tokenizer(family))

    assert handling(FAMILIES["qwen3"]) == (
        False,
        "BOS: the tokenizer has none; the judge reads the chat template's tokens",
    )
    assert handling(FAMILIES["llama3"])[0] is True
    # A template that renders no BOS for a tokenizer that adds one: read as apply_chat_template(tokenize=True) reads it.
    no_bos_template = FAMILIES["llama3"].__class__(
        **{**vars(FAMILIES["llama3"]), "template": FAMILIES["qwen3"].template}
    )
    duplicated, text = handling(no_bos_template)
    assert not duplicated and "renders no <|begin_of_text|>, although the tokenizer adds one" in text
    only_template = FAMILIES["gemma"].__class__(**{**vars(FAMILIES["gemma"]), "tokenizer_adds_bos": False})
    assert handling(only_template) == (False, "BOS: the chat template renders <bos>; the judge reads it once")
    refusing = FAMILIES["gemma"].__class__(**{**vars(FAMILIES["gemma"]), "template": "{{ raise_exception('no') }}"})
    assert handling(refusing) == (
        False,
        "BOS: not checked, the chat template refuses a user and an assistant turn (no)",
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_left_truncation_keeps_the_bos_and_the_conversations_end_and_says_so(family, servers, model_dirs):
    tokenizer = AutoTokenizer.from_pretrained(model_dirs[family])
    long, short = reward_models.long_request(), reward_models.requests()[0]
    full_length = len(token_ids(tokenizer, conversation(long)))
    assert full_length > MAX_INPUT_TOKENS + 20
    served_long, served_short = batch_judge(servers[family], [long, short])
    (expected,) = reference_rewards(
        model_dirs[family], [conversation(long)], lambda t, m: left_truncated_ids(t, m, MAX_INPUT_TOKENS)
    )
    assert served_long["error"] is None
    assert served_long["metadata"]["raw_reward"] == pytest.approx(expected[0], abs=TOLERANCE)
    assert served_long["metadata"]["truncated_tokens"] == full_length - MAX_INPUT_TOKENS
    assert served_long["metadata"]["input_tokens"] == MAX_INPUT_TOKENS
    cut = f"--truncation left cut {full_length - MAX_INPUT_TOKENS} tokens from the conversation's start"
    assert cut in served_long["explanation"]
    assert served_short["metadata"]["truncated_tokens"] == 0 and "cut" not in served_short["explanation"]


def test_without_truncation_a_too_long_input_is_that_items_error(model_dirs):
    judge = load_judge(JudgeConfig(model=str(model_dirs["qwen3"]), max_input_tokens=MAX_INPUT_TOKENS))
    long, short = judge.score_batch(
        [reward_models.judge_item(r) for r in (reward_models.long_request(), reward_models.requests()[0])]
    )
    assert long.score is None and f"longer than --max-input-tokens {MAX_INPUT_TOKENS}" in long.error
    assert short.error is None and "truncated_tokens" not in short.metadata


def test_a_multi_label_head_serves_its_outputs_by_id2label_names(servers, model_dirs):
    requests = reward_models.requests()
    served = batch_judge(servers["labels"], requests)
    expected = reference_rewards(model_dirs["labels"], [conversation(r) for r in requests])
    for response, outputs in zip(served, expected, strict=True):
        named = response["metadata"]["label_outputs"]
        assert list(named) == list(LABELS)
        assert named == pytest.approx(dict(zip(LABELS, outputs, strict=True)), abs=TOLERANCE)
        reward = sum(LABEL_WEIGHTS[name] * value for name, value in zip(LABELS, outputs, strict=True))
        assert response["metadata"]["raw_reward"] == pytest.approx(reward, abs=TOLERANCE)
        assert response["score"] == pytest.approx(1 / (1 + math.exp(-response["metadata"]["raw_reward"])))
    health = httpx.get(f"{servers['labels'].url}/health", timeout=30).json()
    assert "named by the config's id2label" in health["scoring"]


def test_a_multi_label_head_without_weights_is_refused_naming_its_labels(model_dirs):
    with pytest.raises(ValueError, match="give --attribute-weights") as refused:
        load_judge(JudgeConfig(model=str(model_dirs["labels"])))
    assert str(list(LABELS)) in str(refused.value)


def test_health_says_what_the_score_is(servers, tiny_scalar_judge_dir):
    health = httpx.get(f"{servers['qwen3'].url}/health", timeout=30).json()
    assert health["scoring"].startswith("raw_reward (metadata) is the model's own output, no activation")
    assert "score = sigmoid(raw_reward), uncalibrated (no judge.json)" in health["scoring"]
    calibrated = load_judge(JudgeConfig(model=str(tiny_scalar_judge_dir)))
    assert calibrated.identity.scoring.startswith("score = sigmoid((raw_reward - 0) / 1) from judge.json's calibration")


def test_a_one_label_judge_json_still_refuses_a_multi_label_head(model_dirs, tmp_path):
    import shutil

    shutil.copytree(model_dirs["labels"], tmp_path / "judge")
    JudgeSpec(kind="scalar").save(tmp_path / "judge")
    with pytest.raises(ValueError, match="the judge has one label .* num_labels=12"):
        load_judge(JudgeConfig(model=str(tmp_path / "judge")))


def test_truncation_is_refused_for_a_generative_judge(tiny_model_dir):
    with pytest.raises(ValueError, match="--truncation left is for scalar judges"):
        load_judge(JudgeConfig(model=str(tiny_model_dir), truncation="left"))


def gemma2_with_window(out_dir, window: int):
    """A tiny Gemma 2 sequence classifier (its sliding-window and full attention layers) on the Gemma tokenizer."""
    import torch
    from transformers import Gemma2Config

    tokenizer = reward_models.build_tokenizer(FAMILIES["gemma"])
    config = Gemma2Config(**reward_models.size_settings(tokenizer, num_labels=1), sliding_window=window)
    config.architectures = ["Gemma2ForSequenceClassification"]
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def test_a_sliding_window_shorter_than_the_inputs_is_refused_on_the_transformers_backend(tmp_path):
    """The transformers backend's own attention masks have no sliding window: a Gemma 2 whose window (32 tokens
    here, 4096 in the real ones) is shorter than --max-input-tokens would be read otherwise than its own forward
    reads it, so it is refused; inputs within the window are read as its forward reads them."""
    model_dir = gemma2_with_window(tmp_path / "gemma2", window=32)
    with pytest.raises(ValueError, match="sliding window of 32 tokens.*set --max-input-tokens 32 or less"):
        load_judge(JudgeConfig(model=str(model_dir), max_input_tokens=MAX_INPUT_TOKENS))
    judge = load_judge(JudgeConfig(model=str(model_dir), max_input_tokens=32, dtype="float32"))
    requests = [r for r in reward_models.requests() if r["prompt"] == reward_models.requests()[0]["prompt"]]
    verdicts = judge.score_batch([reward_models.judge_item(r) for r in requests])
    expected = reference_rewards(model_dir, [conversation(r) for r in requests])
    read = [(v.metadata["raw_reward"], e[0]) for v, e in zip(verdicts, expected, strict=True) if v.error is None]
    assert len(read) >= 2 and all(served == pytest.approx(own, abs=TOLERANCE) for served, own in read)
