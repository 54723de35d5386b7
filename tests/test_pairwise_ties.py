"""The pairwise verdict tie, end to end: the prompt that offers it and its parser (judge_core.protocol.templates),
the GRPO reward of a tie label, `data_prep offline --pairwise-tie-share` and `--pairwise-wrong-tie-share`, the
export that records it in judge.json (`pairwise_ties`), the judge server that offers it and scores a tie half (on a
tiny real model scripted to known probabilities), and the position consistency of verl's validation dumps."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
from transformers import AutoModelForCausalLM

from data_prep import offline, outputs
from data_prep.records import UsageError
from evaluation.verl_validation import read_step
from judge_core.grpo_rewards import compute_pairwise_score
from judge_core.protocol import templates
from judge_models.config import JudgeConfig
from serving.judges import JudgeItem, load_judge
from tests.support.models import verl_checkpoint
from tests.support.servers import start_server
from tests.test_data_prep_offline import QUESTIONS, SMALL, question_in, read
from tests.test_serving_generative import EOS, build_script_judge
from tests.test_serving_group import judge_group, openrlhf_sample, post_concurrently
from tests.test_verl_validation import as_decoded, dump
from training import export

QUESTION = "What is 2 + 2?"
TIE = "<think>Both say 4.</think><better>tie</better>"
TIES = dataclasses.replace(SMALL, both_orders=True, pairwise_answer_first=True)


def tie_messages(a: str = "It is 4.", b: str = "Four.") -> list[dict]:
    return templates.pairwise_messages(QUESTION, a, b, ties=True)


def test_a_prompt_offers_the_tie_only_when_asked_and_still_splits_into_its_responses():
    offered, plain = tie_messages()[0]["content"], templates.pairwise_messages(QUESTION, "It is 4.", "Four.")[0]
    assert offered.endswith(templates.PAIRWISE_TIE_ANSWER_FORMAT) and templates.offers_tie(offered)
    assert not templates.offers_tie(plain["content"])
    assert templates.prompt_offers_tie(tie_messages()) and not templates.prompt_offers_tie([plain])
    assert templates.split_pairwise_prompt(offered)[1:] == ("It is 4.", "Four.")


def test_tie_parses_only_for_a_judge_offered_it():
    assert templates.parse_pairwise(TIE).error == "better 'tie' is not one of ('A', 'B')"
    assert templates.parse_pairwise(TIE, templates.PAIRWISE_VERDICTS).value == "tie"
    for other in ("Tie", "TIE", "C", "A or B"):
        judgement = templates.parse_pairwise(f"<think>x</think><better>{other}</better>", templates.PAIRWISE_VERDICTS)
        assert not judgement.ok, other
    assert [templates.verdict_in_other_order(v) for v in templates.PAIRWISE_VERDICTS] == ["B", "A", "tie"]


@pytest.mark.parametrize(
    ("answer", "label", "score"),
    [(TIE, "tie", 1.0), (TIE, "A", 0.0), ("<think>x</think><better>A</better>", "tie", 0.0)],
)
def test_the_grpo_reward_counts_a_tie_right_only_against_a_tie_label(answer, label, score):
    reward = compute_pairwise_score("offline/pairwise", answer, templates.pairwise_ground_truth(label))
    assert (reward["score"], reward["accuracy"], reward["format_ok"]) == (score, score, 1.0)


@pytest.fixture(scope="module")
def tie_data(tmp_path_factory):
    plain, tied = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("tied")
    offline.generate(plain, TIES)
    offline.generate(tied, dataclasses.replace(TIES, pairwise_tie_share=0.2))
    return plain, tied


def without_tie_offer(rows: list[dict], column: str) -> str:
    """Rows as JSON with each prompt's tie offer replaced by the plain answer format."""
    text = json.dumps([row[column] for row in rows], default=list)
    return text.replace(templates.PAIRWISE_TIE_ANSWER_FORMAT, templates.PAIRWISE_ANSWER_FORMAT)


def assert_only_pairwise_files_differ(before, after) -> None:
    changed = {outputs.PAIRWISE, outputs.SFT_JUDGE_PAIRWISE}
    for name in sorted(path.relative_to(before) for path in before.rglob("*.parquet")):
        if str(name.parent) not in changed:
            assert (before / name).read_bytes() == (after / name).read_bytes(), name


def test_the_tie_share_adds_tie_rows_and_offers_the_tie_in_every_pairwise_prompt(tie_data):
    plain, tied = tie_data
    assert_only_pairwise_files_differ(plain, tied)
    for split in outputs.SPLITS:
        for dataset, column in ((outputs.PAIRWISE, "prompt"), (outputs.SFT_JUDGE_PAIRWISE, "messages")):
            before, after = (read(out, outputs.split_file(dataset, split)) for out in (plain, tied))
            assert round(0.2 * len(after)) == len(after) - len(before) == round(0.25 * len(before))
            assert without_tie_offer(after[: len(before)], column) == without_tie_offer(before, column)
            assert all(templates.prompt_offers_tie(row[column]) for row in after)


@pytest.mark.parametrize("split", outputs.SPLITS)
def test_a_tie_row_compares_two_correct_statements_of_its_fact_and_its_demonstration_says_tie(tie_data, split):
    plain, tied = tie_data
    added = len(read(tied, outputs.split_file(outputs.PAIRWISE, split))) - len(
        read(plain, outputs.split_file(outputs.PAIRWISE, split))
    )
    grpo = read(tied, outputs.split_file(outputs.PAIRWISE, split))[-added:]
    sft = read(tied, outputs.split_file(outputs.SFT_JUDGE_PAIRWISE, split))[-added:]
    drawn_first = 0
    for grpo_row, sft_row in zip(grpo, sft, strict=True):
        assert grpo_row["reward_model"]["ground_truth"] == templates.pairwise_ground_truth("tie")
        prompt, demonstration = (m["content"] for m in sft_row["messages"])
        assert prompt == grpo_row["prompt"][0]["content"]
        _, a, b = templates.split_pairwise_prompt(prompt)
        _, fact, phrasing = QUESTIONS[question_in(prompt)]
        statement = fact.statement(phrasing, fact.answer)
        assert {a, b} == {statement, offline.reference_answer(fact, phrasing)} and a != b
        drawn_first += a == statement
        answer = templates.parse_pairwise(demonstration, templates.PAIRWISE_VERDICTS)
        assert answer.value == "tie"
        assert answer.reasoning.startswith(f"The correct answer is {fact.answer}; ")
        assert answer.reasoning.endswith(
            f"Response A says {fact.answer}, which is correct; Response B says {fact.answer}, which is correct."
        )
    assert drawn_first == added // 2


@pytest.mark.parametrize("share", [0.0, 1.0, 0.6])
def test_a_tie_share_out_of_range_or_beyond_the_pairs_is_refused(tmp_path, share):
    with pytest.raises(UsageError, match="--pairwise-tie-share"):
        offline.generate(tmp_path, dataclasses.replace(TIES, pairwise_tie_share=share))


WRONG_TIES = dataclasses.replace(TIES, pairwise_tie_share=0.2, pairwise_wrong_tie_share=0.2)


@pytest.fixture(scope="module")
def wrong_tie_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("wrong_ties")
    offline.generate(out, WRONG_TIES)
    return out


def tie_counts(untied_rows: int) -> tuple[int, int]:
    """Correct ties and wrong ties beside `untied_rows` rows, each a fifth of the whole."""
    each = round(0.2 * untied_rows / 0.6)
    return each, each


def test_the_wrong_tie_share_adds_its_rows_after_the_correct_ties_and_changes_no_other_file(tie_data, wrong_tie_data):
    plain, tied = tie_data
    assert_only_pairwise_files_differ(tied, wrong_tie_data)
    for split in outputs.SPLITS:
        untied, rows = (read(out, outputs.split_file(outputs.PAIRWISE, split)) for out in (plain, wrong_tie_data))
        assert len(rows) - len(untied) == sum(tie_counts(len(untied)))
        assert rows[: len(untied)] == read(tied, outputs.split_file(outputs.PAIRWISE, split))[: len(untied)]
        tie = templates.pairwise_ground_truth("tie")
        assert [row["reward_model"]["ground_truth"] for row in rows[len(untied) :]] == [tie] * (len(rows) - len(untied))


@pytest.mark.parametrize("split", outputs.SPLITS)
def test_a_wrong_tie_row_compares_two_wrong_values_of_its_fact_and_its_demonstration_says_both_are_wrong(
    tie_data, wrong_tie_data, split
):
    sft = read(wrong_tie_data, outputs.split_file(outputs.SFT_JUDGE_PAIRWISE, split))
    _, wrong_ties = tie_counts(len(read(tie_data[0], outputs.split_file(outputs.SFT_JUDGE_PAIRWISE, split))))
    for row in sft[-wrong_ties:]:
        prompt, demonstration = (m["content"] for m in row["messages"])
        _, a, b = templates.split_pairwise_prompt(prompt)
        _, fact, phrasing = QUESTIONS[question_in(prompt)]
        said = {fact.statement(phrasing, wrong): wrong for wrong in fact.wrong}
        assert a in said and b in said and said[a] != said[b]
        answer = templates.parse_pairwise(demonstration, templates.PAIRWISE_VERDICTS)
        assert answer.value == "tie"
        assert answer.reasoning.endswith(
            f"Response A says {said[a]}, which is wrong; Response B says {said[b]}, which is wrong."
        )


@pytest.mark.parametrize(
    ("tie_share", "wrong_tie_share", "refusal"),
    [(None, 0.2, "needs --pairwise-tie-share"), (0.2, 0.0, "above 0"), (0.2, 0.8, "below 1 - --pairwise-tie-share")],
)
def test_a_wrong_tie_share_without_ties_or_out_of_range_is_refused(tie_share, wrong_tie_share, refusal):
    with pytest.raises(UsageError, match=refusal):
        dataclasses.replace(TIES, pairwise_tie_share=tie_share, pairwise_wrong_tie_share=wrong_tie_share)


@pytest.fixture(scope="module")
def checkpoint(tiny_model_dir, tmp_path_factory):
    return verl_checkpoint(tiny_model_dir, tmp_path_factory.mktemp("sft_run"), AutoModelForCausalLM)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("offered", "recorded"), [([True, True], True), ([False, False], False), ([True, False], None)]
)
def test_the_export_records_whether_the_training_prompts_offered_the_tie(checkpoint, tmp_path, offered, recorded):
    answer = {"role": "assistant", "content": TIE}
    messages = [[*templates.pairwise_messages(QUESTION, "4", "four", ties), answer] for ties in offered]
    train_file = tmp_path / "train.parquet"
    pd.DataFrame({"messages": messages}).to_parquet(train_file)
    out = export.export_causal_lm(
        checkpoint, tmp_path / "judge", trained_with={"train_file": str(train_file)}, prompt_format="pairwise"
    )
    assert json.loads((out / "judge.json").read_text())["pairwise_ties"] is recorded


# The scripted judge reads the prompt's last paragraph, its answer format: offered the tie, it answers tie with 0.6.
TIE_SCRIPT = {
    templates.PAIRWISE_TIE_ANSWER_FORMAT: "<think>same</think><better>",
    "<think>same</think><better>": {"tie": 0.6, "A": 0.3, "B": 0.1},
    "tie": "</better>",
    "A": "</better>",
    "B": "</better>",
    "</better>": EOS,
}
LAST_PARAGRAPH = "{{ messages[0]['content'].split('\\n\\n')[-1] }}"


@pytest.fixture(scope="module")
def tie_judge_dir(tiny_model_dir, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("tie_judge")
    # Head width even for rotary embeddings: six scripted tokens would make it 3.
    out = build_script_judge(tiny_model_dir, out_dir, TIE_SCRIPT, "", "pairwise", 8, template=LAST_PARAGRAPH)
    spec = json.loads((out / "judge.json").read_text())
    (out / "judge.json").write_text(json.dumps({**spec, "pairwise_ties": True}))
    return out


def test_a_judge_trained_with_ties_is_offered_the_tie_and_a_tie_scores_half(tie_judge_dir):
    judge = load_judge(JudgeConfig(model=str(tie_judge_dir), max_new_tokens=8))
    (verdict,) = judge.score_batch([JudgeItem(QUESTION, "It is 4.", answer="Four.")])
    # The completion as A: P(A) + P(tie) / 2 = 0.3 + 0.3; as B: P(B) + P(tie) / 2 = 0.1 + 0.3.
    assert verdict.metadata["order_scores"] == pytest.approx([0.6, 0.4], abs=1e-6)
    assert verdict.score == pytest.approx(0.5, abs=1e-6)
    assert (verdict.metadata["verdicts"], verdict.metadata["orders_agree"]) == (["tie", "tie"], True)
    sampled = load_judge(JudgeConfig(model=str(tie_judge_dir), max_new_tokens=8, score_mode="sample"))
    (verdict,) = sampled.score_batch([JudgeItem(QUESTION, "It is 4.", answer="Four.")])
    assert (verdict.score, verdict.metadata["order_scores"]) == (0.5, [0.5, 0.5])


def test_a_judge_without_ties_in_its_judge_json_is_not_offered_the_tie(tie_judge_dir, tmp_path):
    spec = json.loads((tie_judge_dir / "judge.json").read_text())
    (tie_judge_dir / "judge.json").write_text(json.dumps({**spec, "pairwise_ties": False}))
    try:
        judge = load_judge(JudgeConfig(model=str(tie_judge_dir), max_new_tokens=8))
        (verdict,) = judge.score_batch([JudgeItem(QUESTION, "It is 4.", answer="Four.")])
    finally:
        (tie_judge_dir / "judge.json").write_text(json.dumps(spec))
    assert verdict.score is None and "unparsable judge answer" in verdict.error


@pytest.mark.e2e
def test_a_tie_judges_group_rewards_split_every_comparison_and_its_orders_agree(tie_judge_dir, tmp_path):
    """/judge_group (all pairs) and OpenRLHF's gathered groups go through /compare: each comparison is a tie, worth
    half to each completion (a tie counted for neither would give the first of a pair 0.2 and the second 0.8)."""
    flags = ["--model", str(tie_judge_dir), "--max-new-tokens", "8", "--openrlhf-group-size", "3"]
    completions = ["It is 4.", "Four.", "2 + 2 = 4."]
    with start_server([*flags, "--openrlhf-group-window-s", "3"], log_path=tmp_path / "server.log") as server:
        group = judge_group(server.url, completions, prompt=[{"role": "user", "content": QUESTION}]).json()
        gathered = post_concurrently(server.url, [openrlhf_sample(QUESTION, answer) for answer in completions])
    assert (group["comparisons_run"], group["metadata"]["position_consistency"]) == (3, 1.0)
    assert [reward["score"] for reward in group["rewards"]] == pytest.approx([0.5] * 3, abs=1e-6)
    assert [reward for answer in gathered for reward in answer.json()["rewards"]] == pytest.approx([0.5] * 3, abs=1e-6)


def tie_pair_dump(folder, step: int, second_verdict: str):
    """A step whose one pair is judged tie with "It is 4." as A, then `second_verdict` with it as B."""
    rows = [
        (as_decoded(tie_messages(a, b)), output, templates.pairwise_ground_truth("tie"))
        for a, b, output in [("It is 4.", "Four.", TIE), ("Four.", "It is 4.", TIE.replace("tie", second_verdict))]
    ]
    return dump(folder, step, rows)


@pytest.mark.parametrize(("second_verdict", "agreeing"), [("tie", 1), ("A", 0), ("B", 0)])
def test_verl_validation_counts_a_tie_in_both_orders_as_consistent_and_only_that(tmp_path, second_verdict, agreeing):
    point = read_step(tie_pair_dump(tmp_path, 1, second_verdict))
    assert (point.pairs, point.agreeing, point.format_failures) == (1, agreeing, 0)
