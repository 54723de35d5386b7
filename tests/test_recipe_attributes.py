"""The multi-aspect (attribute regression) recipe: end to end through bash on the tiny model (CPU mode), its
data checks, its launcher, and the loss and Pearson reduction against numpy.

One module fixture runs the launcher once: 1 process, FSDP1, 4 steps on arithmetic conversations rated on the
five HelpSteer2 attributes (a right answer rates high, "I do not know." low), exported at the end.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import torch

from judge_core.protocol.judge_spec import HELPSTEER2_ATTRIBUTE_WEIGHTS, sigmoid
from tests.launcher_helpers import (
    ATTRIBUTE_LAUNCHER,
    arithmetic_conversations,
    composed,
    judge_spec,
    launch_in_process,
    logged_metrics,
    placeholder_inputs,
    run_launcher,
)
from tests.reward_adapter_servers import make_system
from tests.support.servers import start_server
from tests.test_judge_spec import DOCUMENTED_WEIGHTS
from training import attribute_trainer, export
from training.launch.config import trainer_config
from training.launch.recipe import LaunchError

ATTRIBUTES = list(HELPSTEER2_ATTRIBUTE_WEIGHTS)
STEPS = 4
RIGHT = [4.0, 4.0, 3.5, 1.0, 2.0]  # helpfulness, correctness, coherence, complexity, verbosity
EVASIVE = [0.5, 1.0, 3.0, 0.0, 0.5]


def conversation(prompt: list[dict], answer: str) -> str:
    return json.dumps(prompt + [{"role": "assistant", "content": answer}])


def rated_rows(count: int, seed: int) -> list[dict]:
    """Half right answers, half evasive ones, each rated on the five attributes, with a little spread."""
    rows = []
    for index, (prompt, good, bad) in enumerate(arithmetic_conversations(count, seed)):
        right = index % 2 == 0
        ratings = RIGHT if right else EVASIVE
        jitter = 0.25 * (index % 3) if right else 0.0
        rows.append(
            {
                "conversation": conversation(prompt, good if right else bad),
                **{name: max(0.0, rating - jitter) for name, rating in zip(ATTRIBUTES, ratings, strict=True)},
            }
        )
    return rows


def write_attribute_files(out_dir: Path, train: int = 32, val: int = 16) -> tuple[Path, Path]:
    """attributes/{train,val}.parquet in the recipe's schema."""
    paths = []
    for split, count, seed in (("train", train, 0), ("val", val, 1)):
        paths.append(out_dir / f"{split}.parquet")
        pd.DataFrame(rated_rows(count, seed)).to_parquet(paths[-1])
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def attribute_files(tmp_path_factory):
    return write_attribute_files(tmp_path_factory.mktemp("attributes"))


@pytest.fixture(scope="module")
def run(tiny_model_dir, attribute_files, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("attribute_run") / "run"
    result = run_launcher(
        ATTRIBUTE_LAUNCHER,
        f"trainer.total_training_steps={STEPS}",
        MODEL_PATH=tiny_model_dir,
        TRAIN_FILE=attribute_files[0],
        VAL_FILE=attribute_files[1],
        SAVE_DIR=save_dir,
        TRAIN_BATCH_SIZE=8,
        MICRO_BATCH_SIZE=4,
        MAX_LENGTH=128,
        LR="1e-3",
        TOTAL_EPOCHS=1,
        STRATEGY="fsdp",
        N_GPUS_PER_NODE=1,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-2500:]
    return save_dir, logged_metrics(result.stdout), result.stdout


@pytest.mark.e2e
def test_loss_falls_and_every_metric_is_logged_and_finite(run):
    _, metrics, log = run
    assert sorted(metrics) == list(range(1, STEPS + 1))
    assert metrics[STEPS]["train/loss"] < 0.7 * metrics[1]["train/loss"]
    final = metrics[STEPS]
    expected = {"val/loss"} | {f"val/{kind}/{name}" for kind in ("mse", "pearson") for name in ATTRIBUTES}
    assert expected <= set(final)
    assert all(math.isfinite(final[key]) for key in expected)
    assert all(-1 <= final[f"val/pearson/{name}"] <= 1 for name in ATTRIBUTES)
    assert final["val/loss"] == pytest.approx(np.mean([final[f"val/mse/{name}"] for name in ATTRIBUTES]), rel=1e-6)
    assert "mean squared error on 5 attributes (helpfulness, correctness, coherence, complexity, verbosity)" in log


def conversation_outputs(model_dir: Path, conversations: list[list[dict]]) -> np.ndarray:
    """Each conversation's outputs, scored one at a time (no padding): the test's own reading of the model."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    outputs = []
    for messages in conversations:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            outputs.append(model(input_ids=ids).logits[0].double().numpy())
    return np.stack(outputs)


@pytest.mark.e2e
def test_the_exported_judge_gives_the_trained_models_outputs(run, attribute_files):
    """The trainer's final validation (FSDP model, batched, padded) is recomputed from the exported folder."""
    from transformers import AutoConfig

    save_dir, metrics, _ = run
    frame = pd.read_parquet(attribute_files[1])
    outputs = conversation_outputs(save_dir / "hf", [json.loads(text) for text in frame["conversation"]])
    ratings = frame[ATTRIBUTES].to_numpy()
    trained = metrics[STEPS]
    spec = judge_spec(save_dir / "hf")
    for index, name in enumerate(ATTRIBUTES):
        mse = np.mean((outputs[:, index] - ratings[:, index]) ** 2)
        pearson = np.corrcoef(outputs[:, index], ratings[:, index])[0, 1]
        assert mse == pytest.approx(trained[f"val/mse/{name}"], rel=1e-4), name
        assert pearson == pytest.approx(trained[f"val/pearson/{name}"], rel=1e-4, abs=1e-6), name
        assert spec["trained_with"]["validation"]["mse"][name] == pytest.approx(mse, rel=1e-4)
        assert spec["trained_with"]["validation"]["pearson"][name] == pytest.approx(pearson, rel=1e-4, abs=1e-6)

    assert spec["kind"] == "scalar" and spec["attributes"] == ATTRIBUTES
    assert spec["attribute_weights"] == DOCUMENTED_WEIGHTS
    assert spec["trained_with"]["recipe"] == "multi-aspect" and spec["trained_with"]["steps"] == STEPS
    assert spec["trained_with"]["validation"]["conversations"] == len(frame)
    config = AutoConfig.from_pretrained(save_dir / "hf")
    assert config.architectures == ["LlamaForSequenceClassification"] and config.num_labels == len(ATTRIBUTES)
    assert [config.id2label[index] for index in range(config.num_labels)] == ATTRIBUTES


@pytest.mark.e2e
def test_weights_given_to_the_export_replace_the_defaults_and_bad_ones_are_refused(run, attribute_files, tmp_path):
    save_dir, _, _ = run
    val_file = str(attribute_files[1])
    out = export.export_attribute_judge(save_dir, tmp_path / "hf", val_file, "correctness=1,verbosity=-0.5")
    weights = judge_spec(out)["attribute_weights"]
    assert weights == {"helpfulness": 0.0, "correctness": 1.0, "coherence": 0.0, "complexity": 0.0, "verbosity": -0.5}
    with pytest.raises(ValueError, match="'kindness'"):
        export.export_attribute_judge(save_dir, tmp_path / "bad", val_file, "kindness=1")


@pytest.mark.e2e
def test_a_bradley_terry_export_of_the_attribute_checkpoint_is_refused(run, attribute_files, tmp_path):
    save_dir, _, _ = run
    with pytest.raises(ValueError, match="num_labels=1 .* it has num_labels=5"):
        export.export_scalar_judge(save_dir, tmp_path / "hf", str(attribute_files[1]))


@pytest.mark.e2e
def test_a_checkpoint_whose_config_does_not_know_the_pad_token_is_refused(run, attribute_files, tmp_path):
    """Scalar judges find each sequence's last real token from the pad id: an export must not go without it."""
    save_dir, _, _ = run
    checkpoint = tmp_path / "global_step_1"
    shutil.copytree(export.resolve_checkpoint(save_dir), checkpoint)
    config_file = checkpoint / export.HF_SUBDIR / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "pad_token_id": None}))
    with pytest.raises(ValueError, match="needs the tokenizer's pad token id .* it has pad_token_id=None"):
        export.export_attribute_judge(checkpoint, tmp_path / "hf", str(attribute_files[1]))
    assert not (tmp_path / "hf").exists()


@pytest.mark.e2e
def test_the_export_serves_judge_compare_and_the_reward_adapter(run, tmp_path):
    """`python -m serving --model` on the export: detailed_scores and the weighted score on /judge and
    /batch_judge, /compare on the weighted sums, and JudgeRewardSystem the served reward and attributes."""
    save_dir, _, _ = run
    model_dir = save_dir / "hf"
    conversation_text = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "It is 5."}]
    predictions = conversation_outputs(model_dir, [conversation_text])[0]
    detailed = {name: min(max(value / 4, 0.0), 1.0) for name, value in zip(ATTRIBUTES, predictions, strict=True)}
    weights = HELPSTEER2_ATTRIBUTE_WEIGHTS
    negative = sum(weight for weight in weights.values() if weight < 0)
    expected = (sum(weights[name] * detailed[name] for name in ATTRIBUTES) - negative) / sum(
        abs(weight) for weight in weights.values()
    )
    other = "I do not know."
    with start_server(["--model", str(model_dir)], log_path=tmp_path / "server.log") as server:
        body = httpx.post(
            f"{server.url}/judge", json={"prompt": "What is 2 + 3?", "completion": "It is 5."}, timeout=60
        ).json()
        batch = [{"prompt": "What is 2 + 3?", "completion": text} for text in ("It is 5.", other)]
        judged = httpx.post(f"{server.url}/batch_judge", json={"requests": batch}, timeout=60).json()["responses"]
        compared = httpx.post(
            f"{server.url}/compare",
            json={"prompt": "What is 2 + 3?", "response_a": "It is 5.", "response_b": other},
            timeout=60,
        ).json()
        with make_system(server.url, timeout=60.0, fallback_to_rule=False) as system:
            reward = system.reward("What is 2 + 3?", "It is 5.")
    assert body["error"] is None
    assert body["detailed_scores"] == pytest.approx(detailed, abs=1e-4)
    assert body["score"] == pytest.approx(expected, abs=1e-4)
    assert judged[0]["score"] == pytest.approx(expected, abs=1e-4)
    sums = [sum(weights[name] * r["metadata"]["attribute_predictions"][name] for name in ATTRIBUTES) for r in judged]
    assert compared["score"] == pytest.approx(sigmoid(sums[0] - sums[1]), abs=1e-4)
    assert (reward["reward"], reward["detailed_scores"]) == (
        pytest.approx(expected, abs=1e-4),
        pytest.approx(detailed, abs=1e-4),
    )


def test_a_bad_row_stops_the_trainer_naming_file_row_and_field(tiny_model_dir, attribute_files, tmp_path):
    """The trainer's entry point on the launcher's final config, in process: it stops before any process group."""
    frame = pd.read_parquet(attribute_files[0])
    frame.loc[3, "correctness"] = 4.5
    bad_file = tmp_path / "bad.parquet"
    frame.to_parquet(bad_file)
    knobs = dict(MODEL_PATH=tiny_model_dir, TRAIN_FILE=bad_file, VAL_FILE=attribute_files[1], SAVE_DIR=tmp_path / "run")
    config = trainer_config(composed(ATTRIBUTE_LAUNCHER, **knobs).config)
    message = f"[rank 0] attribute_trainer: {bad_file} row 3 field correctness: expected a finite rating between 0"
    with pytest.raises(SystemExit, match=f"^{re.escape(message)}"):
        attribute_trainer.main.__wrapped__(config)


# --- data --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


GOOD = rated_rows(1, 0)[0]


def read_rows(path: Path, rows: list[dict], tokenizer, names=tuple(ATTRIBUTES)) -> attribute_trainer.AttributeDataset:
    pd.DataFrame(rows).to_parquet(path)
    config = attribute_trainer.AttributeDataConfig(max_length=4096, truncation="left", names=tuple(names))
    return attribute_trainer.AttributeDataset(str(path), tokenizer, config)


@pytest.mark.parametrize(
    "row, field, message",
    [
        ({**GOOD, "correctness": float("inf")}, "correctness", "expected a finite rating between 0 and 4, got inf"),
        ({**GOOD, "verbosity": 4.5}, "verbosity", "between 0 and 4, got 4.5"),
        ({**GOOD, "helpfulness": -1.0}, "helpfulness", "between 0 and 4, got -1.0"),
        ({**GOOD, "coherence": float("nan")}, "coherence", "got None"),  # pandas writes NaN as null
        ({**GOOD, "conversation": "not json"}, "conversation", "not valid JSON"),
        ({**GOOD, "conversation": json.dumps([{"role": "user", "content": "Hi"}])}, "conversation", "last message"),
    ],
)
def test_a_bad_row_is_named_by_file_row_and_field(tmp_path, tokenizer, row, field, message):
    with pytest.raises(attribute_trainer.AttributeDataError, match=rf"data\.parquet row 1 field {field}: .*{message}"):
        read_rows(tmp_path / "data.parquet", [GOOD, row], tokenizer)


def test_missing_attribute_columns_are_named(tmp_path, tokenizer):
    row = {key: value for key, value in GOOD.items() if key != "complexity"}
    with pytest.raises(attribute_trainer.AttributeDataError, match=r"missing column\(s\) \['complexity'\]"):
        read_rows(tmp_path / "data.parquet", [row], tokenizer)
    only_two = read_rows(tmp_path / "two.parquet", [row], tokenizer, names=("helpfulness", "verbosity"))
    assert only_two[0][1].tolist() == [GOOD["helpfulness"], GOOD["verbosity"]]


def test_conversations_are_tokenized_as_the_judge_server_reads_them(tmp_path, tokenizer):
    ids, ratings = read_rows(tmp_path / "data.parquet", [GOOD], tokenizer)[0]
    text = tokenizer.apply_chat_template(json.loads(GOOD["conversation"]), tokenize=False)
    assert ids.tolist() == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ratings.tolist() == [GOOD[name] for name in ATTRIBUTES]


# --- loss and metrics --------------------------------------------------------------------------------


def test_the_loss_is_the_mean_squared_error_over_attributes():
    outputs = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 4.0]])
    ratings = torch.tensor([[1.0, 3.0, 1.0], [2.0, 0.0, 4.0]])
    expected = ((outputs.numpy() - ratings.numpy()) ** 2).mean(-1)
    assert attribute_trainer.regression_losses(outputs, ratings).tolist() == pytest.approx(expected.tolist())


def test_pearson_and_mse_from_sums_split_over_ranks_equal_numpy_on_the_whole_set():
    rng = np.random.default_rng(0)
    ratings = rng.uniform(0, 4, size=(37, 2))
    outputs = ratings * np.array([0.5, -1.0]) + rng.normal(0, 0.7, size=(37, 2))
    shares = [slice(0, 5), slice(5, 29), slice(29, 37)]  # uneven shares, as ranks and micro-batches give
    totals = []
    for share in shares:
        out, rated = torch.tensor(outputs[share]), torch.tensor(ratings[share])
        totals.append(attribute_trainer.attribute_totals(attribute_trainer.regression_losses(out, rated), out, rated))
    metrics = attribute_trainer.attribute_metrics(sum(totals), ["a", "b"], "val")
    for index, name in enumerate("ab"):
        assert metrics[f"val/pearson/{name}"] == pytest.approx(np.corrcoef(outputs[:, index], ratings[:, index])[0, 1])
        assert metrics[f"val/mse/{name}"] == pytest.approx(np.mean((outputs[:, index] - ratings[:, index]) ** 2))
    assert metrics["val/loss"] == pytest.approx(np.mean((outputs - ratings) ** 2))
    assert metrics["val/pearson/a"] > 0 > metrics["val/pearson/b"]


def test_pearson_of_a_constant_side_is_undefined():
    assert math.isnan(attribute_trainer.pearson(3, 6.0, 3.0, 12.0, 5.0, 6.0))  # x = 2, 2, 2


# --- launcher ----------------------------------------------------------------------------------------


@pytest.fixture
def inputs(tmp_path) -> dict[str, str]:
    return placeholder_inputs(tmp_path)


def test_dry_run_passes_the_weights_to_the_export(inputs, capsys):
    weights = "attributes.weights={correctness:1,verbosity:-0.5}"
    assert launch_in_process(ATTRIBUTE_LAUNCHER, "--dry-run", weights, **inputs) == 0
    train, export_line = capsys.readouterr().out.splitlines()[:2]
    assert "-m training.attribute_trainer" in train
    assert export_line.startswith("python -m training.export attributes") and "--recipe multi-aspect" in export_line
    assert export_line.endswith(
        f"--val-file {inputs['VAL_FILE']} --max-length 4096 --truncation left "
        "--attribute-weights correctness=1,verbosity=-0.5"
    )
    assert launch_in_process(ATTRIBUTE_LAUNCHER, "--dry-run", **inputs) == 0
    assert "--attribute-weights" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "override, message",
    [
        ("attributes.weights={kindness:1}", "attributes.weights = {'kindness': 1}: attribute_weights names 'kindness'"),
        ("attributes.weights={verbosity:0}", "must give at least one attribute a non-zero weight"),
        ("attributes.weights=heavy", "attributes.weights = heavy: must be a mapping {name: weight, ...} or null"),
        ("attributes.names=[]", "attributes.names = []: must be a non-empty list of attribute names"),
        ("attributes.names=[a,a]", "attributes.names = [a,a]: names ['a'] more than once"),
        ("attributes.names=[style]", "the default weights are HelpSteer2's; give attributes.weights"),
        ("optim.lr_scheduler=linear", "optim.lr_scheduler = linear: must be one of: cosine, wsd"),
    ],
)
def test_a_bad_attribute_setting_is_refused_naming_it(inputs, override, message):
    with pytest.raises(LaunchError, match=re.escape(message)):
        launch_in_process(ATTRIBUTE_LAUNCHER, "--dry-run", override, **inputs)


def test_help_starts_with_the_scripts_header():
    result = run_launcher(ATTRIBUTE_LAUNCHER, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Multi-aspect judge: a regression head")
    assert re.search(r"^\s+TRAIN_FILE\s+\./data/attributes/train\.parquet\s+data\.train_files\s", result.stdout, re.M)
