"""Prompt-once scoring (judge_models/packing.py, scalar_model.TransformersScalarEngine) against today's padded
forwards, on the tiny Bradley-Terry and multi-attribute judges.

Judge inputs mix shared and unshared prompts (groups of 1 to 5), text and multi-turn prompts, short and long
completions, identical completions and one completion a prefix of another. The reference is the engine with
prompt-once off (padded forwards, which test_scalar_reward_paths.py checks against each sequence alone). The
last tests show that the comparison catches a completion that sees a sibling, and positions that restart.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from judge_core.protocol import templates
from judge_models import packing
from judge_models.transformers_engine import TransformersScalarEngine
from serving.judges.base import JudgeItem
from serving.judges.scalar import prompt_groups
from tests.support.models import build_attribute_judge

TOLERANCE = 1e-4  # fp32; packed and padded outputs of the tiny model differ by about 1e-7
MULTI_TURN = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "Count to three."},
    {"role": "assistant", "content": "one two three"},
    {"role": "user", "content": "Now count backwards from five, slowly, one number per word."},
]
COMPLETIONS = [
    "Paris.",
    "five four three two one",
    "Red, or blue, or green, or any colour of the rainbow you like, and then some more words to make it long.",
    "five four three two one zero",
    "Paris.",
    "No.",
]


def mixed_items() -> list[JudgeItem]:
    """Groups of 5, 3, 3 and 1 items, interleaved as a batch of separate requests would hold them."""
    groups = [
        (MULTI_TURN, COMPLETIONS[:5]),  # identical completions; one a prefix of another
        ("What is the capital city of France? Answer in one word.", COMPLETIONS[::2]),
        ([{"role": "user", "content": "Hi"}], COMPLETIONS[1:3]),
        ("A prompt nobody shares, somewhat longer than the others, with many words in it.", COMPLETIONS[5:]),
        ("Hi", COMPLETIONS[3:4]),  # the same conversation as the message-list "Hi": one group
    ]
    items = [JudgeItem(prompt, completion) for prompt, completions in groups for completion in completions]
    order = sorted(range(len(items)), key=lambda index: (index * 7) % len(items))
    return [items[index] for index in order]


@pytest.fixture(scope="module")
def tokenizer(tiny_scalar_judge_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_scalar_judge_dir)


@pytest.fixture(scope="module")
def attribute_judge_dir(tiny_model_dir, tmp_path_factory):
    weights = {"helpfulness": 1.0, "correctness": 0.5, "verbosity": -0.5}
    return build_attribute_judge(tiny_model_dir, tmp_path_factory.mktemp("attribute_judge"), weights)


def load_engine(
    model_dir, tokenizer, prompt_once: bool, max_tokens_per_forward: int = 4096
) -> TransformersScalarEngine:
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    return TransformersScalarEngine(
        model, tokenizer.pad_token_id, 0.25, max_tokens_per_forward, prompt_once=prompt_once
    )


def judge_inputs(tokenizer, items: list[JudgeItem]) -> list[list[int]]:
    conversations = [templates.conversation_messages(item.prompt, item.completion) for item in items]
    return templates.conversation_token_ids(tokenizer, conversations)


def forward_tokens(model) -> list[int]:
    """A list that collects the tokens of each forward pass of `model` (a real count, not a mock)."""
    counted: list[int] = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: counted.append(kwargs["input_ids"].numel()), with_kwargs=True
    )
    return counted


def test_items_group_by_conversation_in_order_of_first_appearance():
    items = [JudgeItem("a", "x"), JudgeItem([{"role": "user", "content": "b"}], "y"), JudgeItem("b", "z")]
    items += [JudgeItem("a", "w"), JudgeItem([{"role": "system", "content": "a"}], "v")]
    assert prompt_groups(items) == [[0, 3], [1, 2], [4]]


def test_a_groups_prefix_is_packed_once_with_the_positions_of_its_unpacked_sequences():
    group = [[7, 8, 9, 1, 2], [7, 8, 9, 3], [7, 8, 9, 1, 5, 6]]
    row = packing.pack_groups([[[4, 5]], group], max_tokens=100)[0]
    assert row.groups == [1, 0]  # longest first
    assert row.input_ids.tolist() == [[7, 8, 9, 1, 2, 3, 1, 5, 6, 4, 5]]
    assert row.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 3, 4, 5, 0, 1]]
    assert row.output_positions.tolist() == [4, 5, 8, 10]
    assert [(s.start, s.end, s.prompt_start, s.prompt_end) for s in row.layout.segments] == [
        (0, 3, 0, 0),
        (3, 5, 0, 3),
        (5, 6, 0, 3),
        (6, 9, 0, 3),
        (9, 11, 9, 9),  # a group of one: its whole sequence, causal
    ]
    assert packing.shared_prefix_length([[1, 2, 3], [1, 2, 3], [1, 2, 3]]) == 2  # each keeps its last token
    assert packing.shared_prefix_length([[1, 2, 3]]) == 0
    assert packing.useful_tokens(group) == 3 + 2 + 1 + 3


@pytest.mark.parametrize("judge", ["bradley_terry", "attributes"])
@pytest.mark.parametrize("max_tokens_per_forward", [4096, 40])  # every group in one row; a row per group
def test_prompt_once_outputs_equal_todays(
    judge, max_tokens_per_forward, tiny_scalar_judge_dir, attribute_judge_dir, tokenizer
):
    model_dir = tiny_scalar_judge_dir if judge == "bradley_terry" else attribute_judge_dir
    items = mixed_items()
    inputs, groups = judge_inputs(tokenizer, items), prompt_groups(items)
    assert sorted(len(group) for group in groups) == [1, 3, 3, 5]
    today = load_engine(model_dir, tokenizer, prompt_once=False)
    prompt_once = load_engine(model_dir, tokenizer, prompt_once=True, max_tokens_per_forward=max_tokens_per_forward)
    computed = forward_tokens(prompt_once.model)
    expected = torch.tensor(today.raw_outputs(inputs, groups))
    outputs = torch.tensor(prompt_once.raw_outputs(inputs, groups))
    shared = [[inputs[index] for index in group] for group in groups if len(group) > 1]
    assert sum(computed) == sum(len(ids) for ids in inputs) - sum(
        sum(len(ids) for ids in group) - packing.useful_tokens(group) for group in shared
    )  # every shared prompt computed once, no padding
    assert len(expected.unique()) > len(items) - 3, "indistinct outputs (identical completions repeat)"
    assert torch.allclose(outputs, expected, atol=TOLERANCE, rtol=0)


def test_groups_of_one_are_packed_with_no_padding_and_todays_outputs(tiny_scalar_judge_dir, tokenizer):
    items = mixed_items()
    inputs = judge_inputs(tokenizer, items)
    today = load_engine(tiny_scalar_judge_dir, tokenizer, prompt_once=False)
    prompt_once = load_engine(tiny_scalar_judge_dir, tokenizer, prompt_once=True)
    counts = {name: forward_tokens(engine.model) for name, engine in (("today", today), ("once", prompt_once))}
    singles = [[index] for index in range(len(items))]
    expected = torch.tensor(today.raw_outputs(inputs, singles))
    outputs = torch.tensor(prompt_once.raw_outputs(inputs, singles))
    assert torch.allclose(outputs, expected, atol=TOLERANCE, rtol=0)
    assert counts["once"] == [sum(len(ids) for ids in inputs)]  # one packed forward, every token real
    assert sum(counts["today"]) > counts["once"][0]  # today pads the inputs of other lengths


def group_row(tokenizer, items: list[JudgeItem]) -> tuple[packing.PackedRow, list[list[int]]]:
    inputs = judge_inputs(tokenizer, items)
    return packing.pack_groups([inputs], max_tokens=10_000)[0], inputs


def test_a_completion_seeing_a_sibling_would_be_caught(tiny_scalar_judge_dir, tokenizer):
    engine = load_engine(tiny_scalar_judge_dir, tokenizer, prompt_once=True)
    row, inputs = group_row(tokenizer, [JudgeItem(MULTI_TURN, completion) for completion in COMPLETIONS[1:4]])
    prefix, first, second, third = row.layout.segments
    leaky = dataclasses.replace(third, prompt_end=third.start)  # the third sees the first two completions
    layout = dataclasses.replace(row.layout, segments=(prefix, first, second, leaky))
    with torch.no_grad():
        expected = torch.tensor(engine.raw_outputs(inputs, [[0], [1], [2]]))[:, 0]
        right = packing.packed_outputs(engine.model, row)[:, 0]
        wrong = packing.packed_outputs(engine.model, dataclasses.replace(row, layout=layout))[:, 0]
    assert torch.allclose(right, expected, atol=TOLERANCE, rtol=0)
    assert torch.allclose(wrong[:2], expected[:2], atol=TOLERANCE, rtol=0)
    assert abs(wrong[2] - expected[2]) > 100 * TOLERANCE


def test_completion_positions_restarting_would_be_caught(tiny_scalar_judge_dir, tokenizer):
    engine = load_engine(tiny_scalar_judge_dir, tokenizer, prompt_once=True)
    row, inputs = group_row(tokenizer, [JudgeItem(MULTI_TURN, completion) for completion in COMPLETIONS[:3]])
    restarted = torch.cat([torch.arange(s.end - s.start) for s in row.layout.segments])[None]
    with torch.no_grad():
        expected = torch.tensor(engine.raw_outputs(inputs, [[0], [1], [2]]))[:, 0]
        wrong = packing.packed_outputs(engine.model, dataclasses.replace(row, position_ids=restarted))[:, 0]
    assert (wrong - expected).abs().max() > 2 * TOLERANCE  # a small model's rewards move little with positions


async def one_item_requests(url: str, items: list[JudgeItem]) -> tuple[list[dict], list[dict]]:
    """Every item as its own concurrent /judge request (as verl's per-sample calls send a GRPO group), and a
    /compare of each item against the next one of its prompt; the answers in order."""
    import asyncio

    import httpx

    comparisons = [
        {"prompt": a.prompt, "response_a": a.completion, "response_b": b.completion}
        for a, b in zip(items, items[1:], strict=False)
        if a.prompt == b.prompt
    ]
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        judged = [client.post("/judge", json={"prompt": i.prompt, "completion": i.completion}) for i in items]
        compared = [client.post("/compare", json=body) for body in comparisons]
        responses = await asyncio.gather(*judged, *compared)
    for response in responses:
        response.raise_for_status()
    answers = [response.json() for response in responses]
    return answers[: len(items)], answers[len(items) :]


@pytest.mark.e2e
def test_the_server_scores_one_item_requests_of_shared_prompts_as_today(tiny_scalar_judge_dir, tmp_path):
    import asyncio

    from tests.support.servers import start_server

    items = sorted(mixed_items(), key=lambda item: str(item.prompt))  # groups together, for the comparisons
    answers = {}
    for name, flags in (("today", ["--no-prompt-once"]), ("prompt-once", [])):
        command = ["--model", str(tiny_scalar_judge_dir), "--batch-timeout", "0.5", *flags]
        with start_server(command, log_path=tmp_path / f"{name}.log") as server:
            answers[name] = asyncio.run(one_item_requests(server.url, items))
    (today, today_compared), (once, once_compared) = answers["today"], answers["prompt-once"]
    assert len(once_compared) >= 6
    assert max(answer["metadata"]["batch_size"] for answer in once) == len(items)  # one batch: groups can form
    for expected, answer in zip(today + today_compared, once + once_compared, strict=True):
        assert answer["score"] == pytest.approx(expected["score"], abs=TOLERANCE)
        for key in ("raw_reward", "raw_reward_a", "raw_reward_b"):
            if key in expected["metadata"]:
                assert answer["metadata"][key] == pytest.approx(expected["metadata"][key], abs=TOLERANCE)


def test_attention_batches_of_one_segment_give_the_same_outputs(tiny_scalar_judge_dir, tokenizer, monkeypatch):
    engine = load_engine(tiny_scalar_judge_dir, tokenizer, prompt_once=True)
    items = mixed_items()
    inputs, groups = judge_inputs(tokenizer, items), prompt_groups(items)
    batched = torch.tensor(engine.raw_outputs(inputs, groups))
    monkeypatch.setattr(packing, "ATTENTION_BATCH_SCORES", 1)  # every segment alone in its SDPA call
    row = packing.pack_groups([[inputs[i] for i in group] for group in groups], max_tokens=10_000)[0]
    assert len(row.layout.attention_batches(torch.device("cpu"))) == len(row.layout.segments)
    alone = torch.tensor(engine.raw_outputs(inputs, groups))
    assert torch.allclose(alone, batched, atol=TOLERANCE, rtol=0)


def test_packed_forwards_are_used_only_where_they_are_faster_than_padding():
    from transformers.utils import is_flash_attn_2_available

    assert packing.packs_fast("cpu")
    assert packing.packs_fast("cuda:1") == is_flash_attn_2_available()  # per-segment SDPA on CUDA: 0.48x padding
