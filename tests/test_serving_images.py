"""Images in chat prompts (OpenAI-style content parts, judge_core/protocol/content.py) on a judge that reads text
only: refused with 422 naming the part, or, with --drop-images, judged on the text alone with the response saying
so; limits on image count and size give 413 naming the flag; an image that is no data URL is refused naming the
field; and a prompt's key (the client's cache, GRPO groups) holds each image's digest, not its bytes."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from fastapi.testclient import TestClient

from judge_core.protocol.content import ContentError, image_digest
from judge_core.protocol.judge_api import JudgeItem, prompt_key
from judge_models.config import JudgeConfig
from serving.config import ServingConfig
from serving.judges import load_judge
from serving.server import build_local_app


def data_url(payload: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(payload).decode()


RED, BLUE = data_url(b"\x89PNG red pixel"), data_url(b"\x89PNG blue pixel")


def with_images(*urls: str) -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return [{"role": "user", "content": [{"type": "text", "text": "What colour is this?"}, *parts]}]


@pytest.fixture(scope="module")
def scalar_judge(tiny_scalar_judge_dir):
    return load_judge(JudgeConfig(model=str(tiny_scalar_judge_dir)))


def client(judge, **config) -> TestClient:
    return TestClient(build_local_app(judge, ServingConfig(**config)))


def test_a_judge_that_reads_no_images_refuses_them_naming_the_part(scalar_judge):
    with client(scalar_judge) as http:
        refused = http.post("/judge", json={"prompt": with_images(RED), "completion": "Red."})
        assert refused.status_code == 422
        assert "prompt[0].content[1]: this judge reads no images (serve it with --drop-images" in refused.text
        batch = [{"prompt": "Q", "completion": "A"}, {"prompt": with_images(RED), "completion": "Red."}]
        refused = http.post("/batch_judge", json={"requests": batch})
        assert refused.status_code == 422 and "requests[1].prompt[0].content[1]" in refused.text
        assert http.get("/health").json()["reads_images"] is False


def test_dropped_images_leave_the_texts_score_and_the_response_says_so(scalar_judge):
    with client(scalar_judge, drop_images=True) as http:
        dropped = http.post("/judge", json={"prompt": with_images(RED, BLUE), "completion": "Red."}).json()
        text = [{"role": "user", "content": "What colour is this?"}]
        text_only = http.post("/judge", json={"prompt": text, "completion": "Red."}).json()
    assert dropped["metadata"]["images_dropped"] == 2 and "images_dropped" not in text_only["metadata"]
    assert dropped["score"] == text_only["score"]


def test_image_count_and_size_limits_answer_413_naming_the_flag(scalar_judge):
    with client(scalar_judge, drop_images=True, max_images=1, max_image_bytes=14) as http:
        many = http.post("/judge", json={"prompt": with_images(RED, RED), "completion": "Red."})
        assert many.status_code == 413 and "prompt has 2 images; the limit is 1 (--max-images)" in many.text
        large = http.post("/judge", json={"prompt": with_images(BLUE), "completion": "Blue."})
        assert large.status_code == 413
        assert "prompt[0].content[1] is an image of 15 bytes; the limit is 14 (--max-image-bytes)" in large.text
        large_group = http.post("/judge_group", json={"prompt": with_images(BLUE), "completions": ["a", "b"]})
        assert large_group.status_code == 413 and "(--max-image-bytes)" in large_group.text
        group = http.post("/judge_group", json={"prompt": with_images(RED), "completions": ["a", "b"]})
        assert group.status_code == 200 and group.json()["metadata"]["images_dropped"] == 1


def test_an_image_that_is_not_an_inline_data_url_is_refused_naming_the_field(scalar_judge):
    with client(scalar_judge, drop_images=True) as http:
        fetched = http.post("/judge", json={"prompt": with_images("https://example.com/a.png"), "completion": "A"})
        assert fetched.status_code == 422 and "the judge fetches nothing" in fetched.text
        assert fetched.json()["detail"][-1]["loc"][:5] == ["body", "prompt", "list[ChatMessage]", 0, "content"]
    with pytest.raises(ContentError, match=r"message 0 content\[1\].image_url.url: .*the judge fetches nothing"):
        JudgeItem.create(with_images("https://example.com/a.png"), "A")


def test_a_prompt_is_keyed_by_its_images_digests():
    red, blue = JudgeItem.create(with_images(RED), "Red."), JudgeItem.create(with_images(BLUE), "Red.")
    assert red.key() != blue.key() and red.key() == JudgeItem.create(with_images(RED), "Red.").key()
    assert image_digest(RED) == hashlib.sha256(RED.encode()).hexdigest()
    key = json.loads(prompt_key(with_images(RED)))
    assert key[0]["content"][1] == {"type": "image_url", "sha256": image_digest(RED)} and RED not in red.key()
    assert red.request_body("r1")["prompt"][0]["content"][1]["image_url"]["url"] == RED  # the image itself is sent


PNG = b"\x89PNG\r\n\x1a\n tiny image"


def test_a_verl_multimodal_rows_images_reach_the_judge_through_parquet(tmp_path):
    """verl's rows mark images with <image> in the prompt beside an `images` column; its reward function sees only
    extra_info, so the row's question carries them as content parts, read back from parquet as verl reads it."""
    import datasets
    import numpy as np

    from judge_core.protocol.content import with_images as parts_of
    from judge_rewards import verl_reward
    from tests.group_judge_server import GroupJudgeServer

    row = {"prompt": "<image>How many sides has this shape?", "images": [{"bytes": PNG}]}
    question = [{"role": "user", "content": parts_of(row["prompt"], row["images"])}]
    datasets.Dataset.from_list([{"extra_info": {"question": question}}] * 2).to_parquet(tmp_path / "rows.parquet")
    read = datasets.Dataset.from_parquet(str(tmp_path / "rows.parquet"))
    extra_infos = [{"question": np.array(row["extra_info"]["question"], dtype=object)} for row in read]
    server = GroupJudgeServer("longer")
    try:
        scores = verl_reward.compute_score_batch(
            ["geo3k"] * 2,
            ["Four.", "Three sides."],
            [None, None],
            extra_infos,
            judge_url=server.url,
            group_relative=True,
        )
    finally:
        server.close()
    assert [score["score"] for score in scores] == [0.0, 1.0]
    (body,) = server.bodies
    assert body["prompt"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}},
        {"type": "text", "text": "How many sides has this shape?"},
    ]
