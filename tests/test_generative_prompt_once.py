"""Prompt-once for generative judges (transformers backend): judge prompts that share a prefix (a GRPO group's
prompts: same rubric and question, different responses) are generated from one computation of that prefix.
What comes out must be what --no-prompt-once gives: the same greedy text, and the same candidate
log-probabilities (so the same expected scores) within 1e-4 in fp32, for any mix of shared and unshared
prompts, response lengths and multi-turn prompts.

On the random tiny model every token attends to every earlier one, so positions that restart after the prefix,
or a completion that sees another's tokens, change the log-probabilities; on the scripted judges (attention
zeroed) a prefix forward recorded as a generated step moves the step the expected score is read at."""

from __future__ import annotations

import random

import pytest

from judge_core.protocol import templates
from judge_models.config import JudgeConfig
from judge_models.packing import prefix_groups
from judge_models.transformers_engine import MIN_SHARED_PREFIX_TOKENS, TransformersGenerator
from serving.judges import ComparisonItem, JudgeItem, load_judge
from tests.test_serving_generative import POINTWISE_SCRIPT, SPLIT_SCORE, build_script_judge
from tests.test_serving_pairwise import PAIRWISE_SCRIPT
from tests.test_serving_scalar import WORDS

MAX_NEW_TOKENS = 12


# ---- which prompts share a prefix -------------------------------------------------------------------------


def test_groups_are_the_prompts_that_share_the_most_not_just_the_rubric():
    rubric, question_a, question_b = list(range(100, 140)), list(range(200, 240)), list(range(300, 340))
    prompts = [
        rubric + question_a + [1, 2],
        rubric + question_b + [3],
        rubric + question_a + [4, 5, 6],
        rubric + [7, 8],  # shares only the rubric (40 tokens)
        rubric + question_b + [9, 10],
        rubric + question_a + [11],
        [1, 2, 3],  # shares nothing
    ]
    assert prefix_groups(prompts, min_prefix=32) == [[0, 2, 5], [1, 4], [3], [6]]
    # Three prompts alone share only the rubric: one group of them saves 2 x 40 tokens.
    assert prefix_groups([prompts[i] for i in (0, 1, 3)], min_prefix=32) == [[0, 1, 2]]
    assert prefix_groups(prompts, min_prefix=41) == [[0, 2, 5], [1, 4], [3], [6]]
    assert prefix_groups(prompts, min_prefix=81) == [[i] for i in range(7)]
    assert prefix_groups([[5] * 40, [5] * 40, [6]], min_prefix=32) == [[0, 1], [2]]  # identical: each keeps a token
    assert prefix_groups([], min_prefix=32) == [] and prefix_groups([[1]], min_prefix=1) == [[0]]


# ---- generations on the random tiny model -----------------------------------------------------------------


def judge_prompts(tokenizer, seed: int) -> list[list[int]]:
    """Pointwise judge prompts of the real template: groups of 3, 1 and 4 completions (lengths 1 to 60 words)
    of three questions, one of them multi-turn, shuffled; and one prompt again, identical."""
    rng = random.Random(seed)

    def words(low: int, high: int) -> str:
        return " ".join(rng.choices(WORDS, k=rng.randint(low, high)))

    questions = [
        words(5, 30),
        [
            {"role": "user", "content": words(5, 20)},
            {"role": "assistant", "content": words(5, 20)},
            {"role": "user", "content": words(2, 10)},
        ],
        words(20, 40),
    ]
    items = [(question, words(1, 60)) for question, size in zip(questions, (3, 1, 4), strict=True) for _ in range(size)]
    rng.shuffle(items)
    items.append(items[0])
    texts = [
        tokenizer.apply_chat_template(templates.pointwise_messages(q, r), tokenize=False, add_generation_prompt=True)
        for q, r in items
    ]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def generations(model_dir, prompts, prompt_once: bool) -> list:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    config = JudgeConfig(
        model=str(model_dir), max_new_tokens=MAX_NEW_TOKENS, dtype="float32", no_prompt_once=not prompt_once
    )
    candidates = list(range(3, 580, 23))
    return TransformersGenerator(config, tokenizer, candidates).generate(prompts)


def assert_same_generations(once, today) -> None:
    for a, b in zip(once, today, strict=True):
        assert (a.text, a.token_ids, a.hit_token_limit) == (b.text, b.token_ids, b.hit_token_limit)
        assert len(a.candidate_logprobs) == len(b.candidate_logprobs) == len(a.token_ids)
        for step_a, step_b in zip(a.candidate_logprobs, b.candidate_logprobs, strict=True):
            assert step_a == pytest.approx(step_b, abs=1e-4)


@pytest.mark.e2e
@pytest.mark.parametrize("seed", [0, 1])
def test_generations_from_a_shared_prefix_equal_todays(tiny_model_dir, tiny_tokenizer, seed, monkeypatch):
    prompts = judge_prompts(tiny_tokenizer, seed)
    shared = [group for group in prefix_groups(prompts, MIN_SHARED_PREFIX_TOKENS) if len(group) > 1]
    assert len(shared) >= 2
    prefixes = []
    original = TransformersGenerator._prefix_cache
    monkeypatch.setattr(
        TransformersGenerator,
        "_prefix_cache",
        lambda self, ids, mask: prefixes.append(ids.shape[0]) or original(self, ids, mask),
    )
    once = generations(tiny_model_dir, prompts, prompt_once=True)
    assert prefixes == [len(shared)]  # every group's prefix, in one forward
    today = generations(tiny_model_dir, prompts, prompt_once=False)
    assert prefixes == [len(shared)]
    assert_same_generations(once, today)
    # The random model writes the same text for every prompt; its log-probabilities tell them apart.
    assert len({g.candidate_logprobs[-1] for g in today}) == len(set(map(tuple, prompts)))


# ---- expected scores of the scripted judges -----------------------------------------------------------------

# The scripted judges' template keeps one section of the prompt: completions that start alike share a prefix.
SHARED_START = " ".join(["the answer explains each step"] * 10)


@pytest.fixture(scope="module")
def pointwise_script_judge_dir(tiny_model_dir, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("pointwise_script_judge")
    return build_script_judge(tiny_model_dir, out_dir, POINTWISE_SCRIPT, "Response to rate")


@pytest.fixture(scope="module")
def pairwise_script_judge_dir(tiny_model_dir, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("pairwise_script_judge")
    return build_script_judge(tiny_model_dir, out_dir, PAIRWISE_SCRIPT, "Response A", prompt_format="pairwise")


def both_ways(model_dir, judge):
    """`judge(loaded judge)` with prompt-once and with --no-prompt-once."""
    return [
        judge(load_judge(JudgeConfig(model=str(model_dir), max_new_tokens=8, no_prompt_once=not once)))
        for once in (True, False)
    ]


def assert_same_verdicts(once, today) -> None:
    for a, b in zip(once, today, strict=True):
        assert (a.error, a.explanation) == (b.error, b.explanation)
        assert (a.score is None) == (b.score is None)
        if a.score is not None:
            assert a.score == pytest.approx(b.score, abs=1e-4)
            assert_close(a.metadata, b.metadata)


def assert_close(a, b) -> None:
    """Equal, numbers within 1e-4, in nested dicts and lists."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_close(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_close(x, y)
    elif isinstance(a, float):
        assert a == pytest.approx(b, abs=1e-4)
    else:
        assert a == b


def test_pointwise_expected_scores_equal_todays(pointwise_script_judge_dir):
    markers = ["<split>", "<sure>", "<late>", "<split>", "<bad>", "<sure>"]
    items = [JudgeItem("How good is this?", f"{SHARED_START} {'more ' * i}{m}") for i, m in enumerate(markers)]
    items += [JudgeItem("How good is this?", "A short one <split>")]
    once, today = both_ways(pointwise_script_judge_dir, lambda judge: judge.score_batch(items))
    assert_same_verdicts(once, today)
    assert once[0].score == pytest.approx(SPLIT_SCORE, abs=1e-6) and once[-1].score == once[0].score
    assert once[1].score == pytest.approx(0.25, abs=1e-6)


def test_pairwise_expected_scores_equal_todays(pairwise_script_judge_dir):
    question = "What is 2 + 2?"
    items = [
        JudgeItem(question, f"{SHARED_START} it is 4 {'so ' * i}<good>", answer=f"{SHARED_START} it is 5 <bad>")
        for i in range(3)
    ]
    items.append(JudgeItem(question, f"{SHARED_START} <first>", answer="It is four. <first>"))
    comparisons = [ComparisonItem(question, item.completion, item.answer) for item in items]
    once, today = both_ways(
        pairwise_script_judge_dir, lambda judge: judge.score_batch(items) + judge.compare_batch(comparisons)
    )
    assert_same_verdicts(once, today)
    assert once[0].score == pytest.approx(0.8, abs=1e-6)  # 0.9 as A, 0.7 as B
    assert once[3].metadata["order_scores"] == pytest.approx([0.8, 0.2], abs=1e-6)
