"""Generative pointwise judges on tiny real models. In the real judge server: a random-init model answers
gibberish, so each of its judgements must come back as an error (score null), never as a score; a scripted model
gives every item an answer of its own (a score, or an unparsable answer), so a verdict that reaches another
item's request fails. In process: expected scores from a model scripted to a known probability split at the
score's step, and the answers whose probabilities cannot be read exactly."""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil

import httpx
import pytest

from judge_core.protocol import templates
from judge_models.config import JudgeConfig
from serving.judges import JudgeItem, load_judge
from serving.judges.generative import NO_REFERENCE
from tests.support.models import save_successor_judge
from tests.support.servers import start_server
from tests.test_serving_scalar import WORDS, assert_clean_shutdown, metric_value, post_concurrently

MAX_NEW_TOKENS = 8


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):  # no judge.json: the kind comes from the config's LlamaForCausalLM
    running = start_server(
        [
            "--model",
            str(tiny_model_dir),
            "--max-new-tokens",
            str(MAX_NEW_TOKENS),
            "--max-batch-size",
            "4",
            "--temperature",
            "0",
        ],
        log_path=tmp_path_factory.mktemp("generative_server") / "server.log",
    )
    yield running
    assert_clean_shutdown(running)


def test_health_names_a_generative_judge(server):
    health = httpx.get(f"{server.url}/health").json()
    assert (health["judge_kind"], health["backend"], health["model_loaded"]) == ("generative", "transformers", True)


def test_an_unparsable_answer_is_an_error_not_a_score(server):
    response = httpx.post(
        f"{server.url}/judge", json={"prompt": "What is 2+2?", "completion": "4", "request_id": "g1"}, timeout=60
    )
    assert response.status_code == 200
    body = response.json()
    assert body["request_id"] == "g1" and body["score"] is None
    assert body["error"].startswith("unparsable judge answer: ")
    assert isinstance(body["metadata"]["judge_output"], str)
    assert 0 < body["metadata"]["generated_tokens"] <= MAX_NEW_TOKENS


SCRIPTED_ITEMS = 8


def scripted_answer(item: int) -> str:
    """Item 0..4 scores item/4; items 5..7 give an out-of-range score, an unparsable answer."""
    return f"<think>verdict {item}</think><score>{item}</score>"


def build_scripted_generative_judge(tiny_model_dir, out_dir):
    """A real Llama causal LM whose greedy answer to a judge prompt whose response ends with the marker
    token `<item i>` is scripted_answer(i), for i < SCRIPTED_ITEMS.

    Its chat template keeps only the response to rate, so each prompt ends with its marker; attention and
    MLP outputs are zeroed and the embeddings one-hot, so the LM head maps the marker to its answer (one
    added token) and the answer to the end of the turn. What is under test is the server's batching and
    ordering, not the model."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = "{{ messages[0]['content'].split('## Response to rate\\n')[1].split('\\n\\n')[0] }}"
    markers = [f"<item{i}>" for i in range(SCRIPTED_ITEMS)]
    answers = [scripted_answer(i) for i in range(SCRIPTED_ITEMS)]
    tokenizer.add_tokens(markers + answers)
    marker_ids, answer_ids = tokenizer.convert_tokens_to_ids(markers), tokenizer.convert_tokens_to_ids(answers)
    successors = {**dict(zip(marker_ids, answer_ids, strict=True)), **dict.fromkeys(answer_ids, tokenizer.eos_token_id)}
    return save_successor_judge(tokenizer, successors, out_dir)


@pytest.fixture(scope="module")
def scripted_server(tiny_model_dir, tmp_path_factory):
    model_dir = build_scripted_generative_judge(tiny_model_dir, tmp_path_factory.mktemp("scripted_judge"))
    running = start_server(
        # The long batch timeout lets concurrent requests meet in batches of 4 (a batch of 1 cannot cross verdicts).
        # Sample mode: each scripted answer is one token, so the score's probabilities could not be read.
        [
            *("--model", str(model_dir), "--max-batch-size", "4", "--batch-timeout", "2", "--temperature", "0"),
            *("--score-mode", "sample"),
        ],
        log_path=tmp_path_factory.mktemp("scripted_server") / "server.log",
    )
    yield running
    assert_clean_shutdown(running)


def scripted_requests(seed: int) -> list[tuple[int, dict]]:
    """One request per scripted item, shuffled, of varied lengths (so batches hold several length groups)."""
    rng = random.Random(seed)
    items = rng.sample(range(SCRIPTED_ITEMS), SCRIPTED_ITEMS)
    return [
        (
            item,
            {
                "prompt": " ".join(rng.choices(WORDS, k=rng.randint(2, 30))),
                "completion": " ".join(rng.choices(WORDS, k=rng.randint(1, 60))) + f" <item{item}>",
                "request_id": f"req-{position}",
            },
        )
        for position, item in enumerate(items)
    ]


def assert_answers_its_own_item(body: dict, item: int, request: dict) -> None:
    assert body["request_id"] == request["request_id"]
    if item <= 4:
        assert (body["score"], body["error"]) == (item / 4, None)
        assert (body["explanation"], body["metadata"]["judge_score"]) == (f"verdict {item}", item)
    else:
        assert (body["score"], body["error"]) == (None, f"unparsable judge answer: score {item} outside 0..4")
        assert body["metadata"]["judge_output"] == scripted_answer(item)


def test_batch_items_are_judged_one_by_one_in_order(scripted_server):
    requests = scripted_requests(seed=5)
    errors_before = metric_value(scripted_server.url, "judge_judgements_total", {"outcome": "error"})
    response = httpx.post(
        f"{scripted_server.url}/batch_judge", json={"requests": [r for _, r in requests]}, timeout=120
    )
    assert response.status_code == 200
    responses = response.json()["responses"]
    assert len(responses) == len(requests)
    for body, (item, request) in zip(responses, requests, strict=True):
        assert_answers_its_own_item(body, item, request)
    assert max(body["metadata"]["batch_size"] for body in responses) > 1
    errors = metric_value(scripted_server.url, "judge_judgements_total", {"outcome": "error"}) - errors_before
    assert errors == SCRIPTED_ITEMS - 5


def test_concurrent_generations_keep_their_request_ids(scripted_server):
    requests = scripted_requests(seed=6)
    responses = asyncio.run(post_concurrently(scripted_server.url, "/judge", [r for _, r in requests]))
    bodies = [r.json() for r in responses]
    for body, (item, request) in zip(bodies, requests, strict=True):
        assert_answers_its_own_item(body, item, request)
    assert max(body["metadata"]["batch_size"] for body in bodies) > 1
    assert httpx.get(f"{scripted_server.url}/health").json()["queue_depth"] == 0


# ---- expected scores ------------------------------------------------------------------------------------

EOS = "<|im_end|>"  # the tiny tokenizer's end of turn

# What the script judge answers after the marker that ends the response to rate (see build_script_judge):
# marker -> answer pieces, each piece -> the next one, or a distribution of the next one.
POINTWISE_SCRIPT = {
    "<split>": "<think>split</think><score>",
    # 0.2 goes to "5", no score: renormalized over 0..4, 3 has 0.7 and 4 0.3.
    "<think>split</think><score>": {"3": 0.56, "4": 0.24, "5": 0.2},
    "<sure>": "<think>sure</think><score>",
    "<think>sure</think><score>": "1",
    # The reasoning quotes a score: the value read is the one after </think>.
    "<late>": "<think><score>1</score></think><score>",
    "<think><score>1</score></think><score>": {"4": 0.6, "2": 0.4},
    # " 3" is one token: the value starts inside it.
    "<spaced>": "<think>spaced</think><score>",
    "<think>spaced</think><score>": " 3",
    " 3": "</score>",
    # "3</score>" is one token: it starts at the value, but is not the token of "3".
    "<glued>": "<think>glued</think><score>",
    "<think>glued</think><score>": "3</score>",
    "3</score>": EOS,
    "<bad>": "<think>bad</think><score>",
    "<think>bad</think><score>": "7",
    **dict.fromkeys(["1", "2", "3", "4", "7"], "</score>"),
    "</score>": EOS,
}
SPLIT_SCORE = (0.7 * 3 + 0.3 * 4) / 4
LATE_SCORE = (0.6 * 4 + 0.4 * 2) / 4


def build_script_judge(
    tiny_model_dir,
    out_dir,
    script: dict,
    section: str,
    prompt_format: str = "pointwise",
    min_hidden_size: int = 4,
    template: str | None = None,
):
    """A real Llama causal LM (save_successor_judge) that answers a judge prompt by `script`, starting from the
    marker that ends `section` of the prompt (its chat template keeps only that section, or `template` does).
    Every piece of the script that is not one token of the tiny tokenizer is added to it as a token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = template or (
        "{{ messages[0]['content'].split('## " + section + "\\n')[1].split('\\n\\n')[0] }}"
    )
    pieces = {*script, *(p for nxt in script.values() for p in (nxt if isinstance(nxt, dict) else [nxt]))}
    tokenizer.add_tokens(sorted(p for p in pieces if len(tokenizer.encode(p, add_special_tokens=False)) != 1))

    def token(piece: str) -> int:
        (token_id,) = tokenizer.encode(piece, add_special_tokens=False)
        return token_id

    successors = {
        token(piece): {token(p): q for p, q in nxt.items()} if isinstance(nxt, dict) else token(nxt)
        for piece, nxt in script.items()
    }
    return save_successor_judge(tokenizer, successors, out_dir, prompt_format, min_hidden_size)


@pytest.fixture(scope="module")
def pointwise_script_judge_dir(tiny_model_dir, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("pointwise_script_judge")
    return build_script_judge(tiny_model_dir, out_dir, POINTWISE_SCRIPT, "Response to rate")


def judge_markers(model_dir, score_mode: str, markers: list[str]) -> dict:
    judge = load_judge(JudgeConfig(model=str(model_dir), score_mode=score_mode, max_new_tokens=8))
    verdicts = judge.score_batch([JudgeItem("How good is this?", f"A response {m}") for m in markers])
    return dict(zip(markers, verdicts, strict=True))


def test_the_expected_score_weighs_each_score_by_the_judges_probability(pointwise_script_judge_dir):
    verdicts = judge_markers(pointwise_script_judge_dir, "expected", ["<split>", "<sure>", "<late>"])
    split = verdicts["<split>"]
    assert split.error is None and split.score == pytest.approx(SPLIT_SCORE, abs=1e-6)
    probabilities = split.metadata["score_probabilities"]
    assert list(probabilities) == ["0", "1", "2", "3", "4"]
    assert [probabilities[v] for v in "01234"] == pytest.approx([0, 0, 0, 0.7, 0.3], abs=1e-6)
    assert split.metadata["confidence"] == pytest.approx(0.7, abs=1e-6)
    assert split.metadata["score_mass"] == pytest.approx(0.8, abs=1e-6)
    assert (split.metadata["judge_score"], split.metadata["score_mode"], split.explanation) == (3, "expected", "split")
    assert verdicts["<sure>"].score == pytest.approx(0.25, abs=1e-6)
    assert verdicts["<sure>"].metadata["confidence"] == pytest.approx(1.0, abs=1e-6)
    late = verdicts["<late>"]
    assert (late.error, late.metadata["judge_score"]) == (None, 4)
    assert late.score == pytest.approx(LATE_SCORE, abs=1e-6)


def test_sample_mode_scores_the_generated_value_as_before(pointwise_script_judge_dir):
    markers = ["<split>", "<late>", "<spaced>", "<glued>"]
    verdicts = judge_markers(pointwise_script_judge_dir, "sample", markers)
    assert [verdicts[m].score for m in markers] == [0.75, 1.0, 0.75, 0.75]
    split = verdicts["<split>"]
    assert split.metadata == {"judge_score": 3, "generated_tokens": 3, "score_mode": "sample"}


@pytest.mark.parametrize("score_mode", ["expected", "sample"])
def test_an_answer_that_does_not_parse_is_an_error_in_both_modes(pointwise_script_judge_dir, score_mode):
    verdict = judge_markers(pointwise_script_judge_dir, score_mode, ["<bad>"])["<bad>"]
    assert (verdict.score, verdict.error) == (None, "unparsable judge answer: score 7 outside 0..4")
    assert verdict.metadata["judge_output"] == "<think>bad</think><score>7</score>"


def test_an_item_whose_judge_input_is_empty_is_that_items_error(pointwise_script_judge_dir):
    """The script judge's chat template keeps only the response: an empty one renders no token at all."""
    judge = load_judge(JudgeConfig(model=str(pointwise_script_judge_dir), max_new_tokens=8))
    completions = ["A response <sure>", "", "A response <split>"]
    sure, empty, split = judge.score_batch([JudgeItem("How good is this?", c) for c in completions])
    assert (empty.score, empty.error) == (
        None,
        "judge input is empty (0 tokens): the judge's chat template renders nothing for it",
    )
    assert (sure.score, split.score) == (0.25, pytest.approx(SPLIT_SCORE, abs=1e-6))


def test_a_value_not_written_as_its_own_token_is_an_error_in_expected_mode(pointwise_script_judge_dir):
    verdicts = judge_markers(pointwise_script_judge_dir, "expected", ["<spaced>", "<glued>"])
    spaced, glued = verdicts["<spaced>"], verdicts["<glued>"]
    assert spaced.score is None and glued.score is None
    assert spaced.error == (
        "cannot read the judge's probabilities of its answer: "
        "the <score> value '3' does not start at a generated token's boundary"
    )
    assert glued.error == (
        "cannot read the judge's probabilities of its answer: "
        "the generated token '3</score>' that starts the <score> value is not just '3'"
    )
    assert glued.metadata["judge_output"] == "<think>glued</think><score>3</score>"


def test_a_tokenizer_that_splits_a_score_value_is_refused_at_load_time(tiny_model_dir, tmp_path):
    script = {"<m>": "<think>x</think><score>", "<think>x</think><score>": "<score>3"}
    model_dir = build_script_judge(tiny_model_dir, tmp_path, script, "Response to rate")
    with pytest.raises(ValueError, match="does not write the answer value '3' as one token after <score>"):
        load_judge(JudgeConfig(model=str(model_dir)))
    assert load_judge(JudgeConfig(model=str(model_dir), score_mode="sample")).identity.kind == "generative"


def test_the_value_offset_is_that_of_the_answer_after_the_reasoning():
    text = "<think>I would say <score>1</score></think> <score> 3</score>"
    assert templates.parse_pointwise(text).value == 3
    assert text[templates.answer_value_offset(text, templates.POINTWISE_TAG) :] == "3</score>"


def test_recorded_candidate_logprobs_are_those_of_the_raw_logits_of_every_step(tiny_model_dir):
    """The recorder keeps only the candidates' columns, step by step; they must equal the log-softmax of the whole
    raw logits that generate's `output_logits` returns (a padded batch, sampled at temperature 0.7 with a
    repetition penalty: neither may leak into them), and the hook must be gone afterwards."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from judge_models.transformers_engine import CandidateRecorder

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    batch = tokenizer.pad({"input_ids": [[5, 6, 7, 8, 9], [10, 11]]}, return_tensors="pt")
    candidates = [3, 17, 42]
    settings = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": True, "temperature": 0.7}
    torch.manual_seed(0)
    with torch.inference_mode(), CandidateRecorder(model, candidates) as recorder:
        output = model.generate(
            **batch, **settings, repetition_penalty=1.5, return_dict_in_generate=True, output_logits=True
        )
    expected = torch.stack([torch.log_softmax(step.float(), dim=-1)[:, candidates] for step in output.logits], 1)
    torch.testing.assert_close(torch.tensor(recorder.logprobs()), expected, atol=1e-5, rtol=0)
    assert len(recorder.logprobs()[0]) == 6 and not model._forward_hooks


def test_with_reference_from_answer_the_answer_is_the_reference_and_a_request_without_one_fails(
    pointwise_script_judge_dir,
):
    judge = load_judge(JudgeConfig(model=str(pointwise_script_judge_dir), max_new_tokens=8, reference_from_answer=True))
    assert judge.identity.reads_answer
    item = JudgeItem("How good is this?", "A response <sure>", answer="The answer is 4.")
    assert "\n\n## Reference answer\nThe answer is 4.\n\n" in judge.input_messages(item)[0]["content"]
    with_reference, without = judge.score_batch([item, JudgeItem("How good is this?", "A response <sure>")])
    assert (with_reference.score, with_reference.error) == (0.25, None)
    assert (without.score, without.error) == (None, NO_REFERENCE)


def test_without_reference_from_answer_the_answer_never_reaches_the_judge(pointwise_script_judge_dir):
    judge = load_judge(JudgeConfig(model=str(pointwise_script_judge_dir), max_new_tokens=8))
    assert not judge.identity.reads_answer
    item = JudgeItem("How good is this?", "A response <sure>", answer="The answer is 4.")
    assert "Reference answer" not in judge.input_messages(item)[0]["content"]


def with_reference_record(model_dir, out_dir, reference_in_prompts) -> str:
    """A copy of a pointwise judge whose judge.json says whether its training prompts showed a reference."""
    shutil.copytree(model_dir, out_dir)
    spec = json.loads((out_dir / "judge.json").read_text())
    (out_dir / "judge.json").write_text(json.dumps({**spec, "reference_in_prompts": reference_in_prompts}))
    return str(out_dir)


@pytest.mark.parametrize(
    ("reference_in_prompts", "reference_from_answer", "refusal"),
    [
        (True, False, "trained with a reference answer in every prompt (judge.json: reference_in_prompts true); "
         "serve it with --reference-from-answer"),
        (False, True, "trained without reference answers (judge.json: reference_in_prompts false)"),
        (True, True, None),
        (False, False, None),
        (None, True, None),  # an export that does not say (older, or a mixed train file): the flag decides
        (None, False, None),
    ],
)  # fmt: skip
def test_a_judge_is_shown_a_reference_exactly_when_it_was_trained_with_one(
    pointwise_script_judge_dir, tmp_path, reference_in_prompts, reference_from_answer, refusal
):
    model = with_reference_record(pointwise_script_judge_dir, tmp_path / "judge", reference_in_prompts)
    config = JudgeConfig(model=model, max_new_tokens=8, reference_from_answer=reference_from_answer)
    if refusal is None:
        assert load_judge(config).identity.reads_answer is reference_from_answer
        return
    with pytest.raises(ValueError, match=f"^{re.escape(f'{model} was {refusal}')}"):
        load_judge(config)


def test_reference_from_answer_is_refused_for_a_judge_that_cannot_read_one(tiny_model_dir, tmp_path):
    pairwise = build_script_judge(tiny_model_dir, tmp_path / "pairwise", POINTWISE_SCRIPT, "Response A", "pairwise")
    for model, kind in ((pairwise, "pairwise"), (tiny_model_dir, "scalar")):
        config = JudgeConfig(model=str(model), judge=kind if kind == "scalar" else None, reference_from_answer=True)
        with pytest.raises(ValueError, match=re.escape(f"for pointwise generative judges; {model} is a {kind} judge")):
            load_judge(config)
