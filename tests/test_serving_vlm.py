"""A vision-language judge reads the prompt's images (tests/support/vlm.py's tiny random Idefics3, SmolVLM's
architecture): generative pointwise and pairwise, on transformers here (vLLM in process:
tests/frameworks/test_vllm_vlm.py). Its random weights answer nothing parsable, so what it generates is compared:
the same text with two different images must give different answers, the same image twice the same one. A judge
that ignored the images would answer the three alike."""

from __future__ import annotations

import base64
import io

import httpx
import pytest

from judge_core.protocol.content import image_bytes
from judge_core.protocol.judge_spec import JudgeSpec
from judge_models.config import JudgeConfig
from judge_models.transformers_engine import TransformersGenerator
from serving.judges import ComparisonItem, JudgeItem, load_judge
from tests.support.servers import start_server
from tests.support.vlm import build_tiny_vlm


def png_url(colour: str) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), colour).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def shown(url: str) -> list[dict]:
    parts = [{"type": "text", "text": "What colour is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


RED, BLUE = png_url("red"), png_url("blue")


@pytest.fixture(scope="module")
def vlm_dirs(tmp_path_factory):
    """The tiny VLM as a pointwise and as a pairwise judge."""
    built = build_tiny_vlm(None, tmp_path_factory.mktemp("tiny_vlm"))
    dirs = {}
    for prompt_format in ("pointwise", "pairwise"):
        out = tmp_path_factory.mktemp(f"vlm_{prompt_format}")
        for path in built.iterdir():
            if path.is_file():
                (out / path.name).write_bytes(path.read_bytes())
        JudgeSpec(kind="generative", prompt_format=prompt_format).save(out)
        dirs[prompt_format] = out
    return dirs


def answers(verdicts) -> list[str]:
    return [verdict.metadata["judge_output"] if verdict.score is None else verdict.score for verdict in verdicts]


def test_a_pointwise_vision_judge_reads_the_image(vlm_dirs):
    judge = load_judge(JudgeConfig(model=str(vlm_dirs["pointwise"]), max_new_tokens=6, score_mode="sample"))
    assert judge.identity.reads_images
    (conversation,) = judge.conversations([JudgeItem(shown(RED), "Red.")])
    assert conversation[-1]["content"][0] == {"type": "image_url", "image_url": {"url": RED}}
    assert "[User]\nWhat colour is this?\n\n[image 1]" in conversation[-1]["content"][1]["text"]
    (ids,), _ = judge.prompt_token_ids([conversation])
    assert ids.count(judge._tokenizer.convert_tokens_to_ids("<image>")) == 1  # the engine expands it
    items = [JudgeItem(shown(url), "Red.") for url in (RED, BLUE, RED)]
    red, blue, red_again = answers(judge.score_batch(items))
    assert red == red_again and red != blue
    conversations = judge.conversations(items)
    first_tokens = sorted({generation.token_ids[0] for generation in judge._generate(conversations)})
    generator = TransformersGenerator(judge._config, judge._tokenizer, candidate_ids=first_tokens)
    images = [[image_bytes(url, "url")] for url in (RED, BLUE, RED)]
    generations = generator.generate(judge.prompt_token_ids(conversations)[0], images)
    red, blue, red_again = (generation.candidate_logprobs[0] for generation in generations)
    assert red == red_again and red != blue


def test_a_pairwise_vision_judge_reads_the_image_in_both_orders(vlm_dirs):
    judge = load_judge(JudgeConfig(model=str(vlm_dirs["pairwise"]), max_new_tokens=6, score_mode="sample"))
    conversations = judge._in_both_orders([(shown(RED), "Red.", "Blue.", None)])
    assert all(c[-1]["content"][0]["image_url"]["url"] == RED for c in conversations)
    generations = judge._generate(judge._in_both_orders([(shown(u), "Red.", "Blue.", None) for u in (RED, BLUE, RED)]))
    texts = [g.text for g in generations]
    assert texts[0:2] == texts[4:6] and texts[0:2] != texts[2:4]
    assert len(judge.compare_batch([ComparisonItem(shown(RED), "Red.", "Blue.")])) == 1


def test_the_server_takes_images_for_a_vision_judge(vlm_dirs, tmp_path):
    flags = ["--model", str(vlm_dirs["pointwise"]), "--max-new-tokens", "6", "--score-mode", "sample"]
    with start_server(flags, tmp_path / "server.log") as server:
        assert httpx.get(f"{server.url}/health").json()["reads_images"] is True
        body = {"requests": [{"prompt": shown(u), "completion": "Red."} for u in (RED, BLUE, RED)]}
        red, blue, red_again = httpx.post(f"{server.url}/batch_judge", json=body, timeout=120).json()["responses"]
    assert "images_dropped" not in red["metadata"]
    assert red["metadata"]["judge_output"] == red_again["metadata"]["judge_output"] != blue["metadata"]["judge_output"]
