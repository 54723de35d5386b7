"""Judge templates and rubrics users bring (`--judge-template`, judge_core/judge_template.py): a bad file fails at
start-up naming it and the key or placeholder; the rubric reaches the judge's prompt (two rubrics, two answers of
a scripted judge), is required by a template that reads one and refused by any other judge (422 naming the
field), and is part of the client's cache key; verl's extra_info.rubric and TRL's rubric column bring it."""

from __future__ import annotations

import httpx
import pytest

from judge_core.judge_template import TemplateError, load_template
from judge_core.protocol.judge_api import ComparisonItem, JudgeItem
from judge_models.config import JudgeConfig
from judge_rewards import JudgeRewardSystem, JudgeUnavailableError, verl_reward
from judge_rewards.trl_reward import JudgeReward
from serving.judges import load_judge
from tests.conftest import REPO_ROOT
from tests.support.servers import start_server
from tests.test_serving_generative import POINTWISE_SCRIPT, build_script_judge
from tests.test_serving_pairwise import pairwise_judge_dir  # noqa: F401  (a module fixture used below)

EXAMPLE = REPO_ROOT / "serving" / "templates" / "rubric_judge.yaml"
# The scripted judge answers by the marker in its prompt's "## Response to rate" section: the rubric goes there.
SCRIPTED = """\
user: |
  Question: {prompt}

  ## Response to rate
  {completion} {rubric}

  Reply with <score>N</score>.
parser:
  tag: score
  range: [0, 4]
"""


# test_serving_pairwise.py's scripted judge reads the marker ending "## Response A": <good> there gives A, <bad> B.
PAIRWISE = """\
user: |
  Question: {prompt}

  ## Response A
  {response_a}

  ## Response B
  {response_b}

  Criteria: {rubric}
  Which response is better? Answer <better>A</better> or <better>B</better>.
parser:
  tag: better
  verdicts: [A, B]
"""


@pytest.fixture(scope="module")
def scripted_judge_dir(tiny_model_dir, tmp_path_factory):
    return build_script_judge(tiny_model_dir, tmp_path_factory.mktemp("scripted"), POINTWISE_SCRIPT, "Response to rate")


@pytest.fixture
def template(tmp_path):
    path = tmp_path / "scripted.yaml"
    path.write_text(SCRIPTED)
    return path


@pytest.mark.parametrize(
    "text, message",
    [
        (SCRIPTED.replace("{rubric}", "{criteria}"), r"user: unknown placeholder \{criteria\}"),
        (SCRIPTED.replace("{completion}", "{{completion}}"), r"user: needs \{completion\}"),
        (SCRIPTED.replace("tag: score", "regex: 'Score: \\d+'"), r"parser.regex: needs a group"),
        (SCRIPTED.replace("[0, 4]", "[4, 0]"), r"parser.range: the lowest score must be below the highest"),
        (SCRIPTED.replace("  tag: score\n", ""), r"parser: needs exactly one of \('tag', 'regex', 'json_field'\)"),
        (PAIRWISE.replace("{response_b}", "{completion}"), r"user: a pairwise template needs \{response_a\} and"),
        (PAIRWISE.replace("Criteria", "{answer}"), r"user: a pairwise template compares .* drop \['answer'\]"),
        (PAIRWISE.replace("verdicts: [A, B]", "range: [0, 1]"), r"parser: unknown keys \['range'\]"),
        (PAIRWISE.replace("[A, B]", "[A, A]"), r"parser.verdicts: must be 2 or 3 distinct texts"),
        (SCRIPTED.replace("parser:", "sytem: x\nparser:"), r"unknown keys \['sytem'\]"),
        (SCRIPTED.replace("Question: {prompt}", "Question: {prompt"), r"user: .*literal braces"),
    ],
)
def test_a_bad_template_fails_at_start_up_naming_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(TemplateError, match=rf"bad.yaml: {message}"):
        load_template(path)


def test_the_example_template_reads_a_rubric_and_a_score_from_1_to_10():
    example = load_template(EXAMPLE)
    assert example.reads_rubric and not example.reads_answer
    assert example.read("fine <score>10</score>").score == 1.0 and example.read("<score>4</score>").score == 1 / 3
    assert example.read("<score>11</score>").error == "score 11 is outside the template's range [1, 10]"
    messages = example.messages("What is 2 + 2?", "4", None, "- exact\n- short")
    assert "- exact\n- short" in messages[1]["content"] and messages[0]["role"] == "system"


def test_the_pairwise_example_reads_three_verdicts():
    example = load_template(EXAMPLE.with_name("pairwise_judge.yaml"))
    assert example.pairwise and example.reads_rubric
    assert [example.read(f"<better>{v}</better>").score for v in ("A", "B", "tie")] == [1.0, 0.0, 0.5]
    assert example.read("<better>C</better>").error == "the verdict 'C' is none of the template's ['A', 'B', 'tie']"
    content = example.pair_messages("Q?", "first", "second", "- exact")[1]["content"]
    assert content.index("first") < content.index("second") and "- exact" in content


def test_the_rubric_reaches_the_judge_and_the_templates_parser_reads_its_score(scripted_judge_dir, template):
    config = JudgeConfig(model=str(scripted_judge_dir), judge_template=str(template), max_new_tokens=8)
    with pytest.raises(ValueError, match=r"scripted.yaml: the template's parser reads the generated answer; .*sample"):
        load_judge(config)
    config.score_mode = "sample"
    judge = load_judge(config)
    items = [JudgeItem.create("How good?", "A response", rubric=rubric) for rubric in ("<sure>", "<bad>", None)]
    sure, bad, missing = judge.score_batch(items)
    assert (sure.score, sure.metadata["judge_score"], sure.error) == (0.25, 1.0, None)
    assert bad.score is None and "score 7 is outside the template's range [0, 4]" in bad.error
    assert missing.score is None and "the request has no `rubric`" in missing.error
    assert judge.identity.reads_rubric and "(N - 0) / (4 - 0)" in judge.identity.scoring


def test_the_server_answers_422_for_a_rubric_missing_or_unread(scripted_judge_dir, template, tmp_path):
    flags = ["--judge-template", str(template), "--score-mode", "sample", "--max-new-tokens", "8"]
    with start_server(["--model", str(scripted_judge_dir), *flags], tmp_path / "server.log") as server:
        judged = httpx.post(
            f"{server.url}/judge", json={"prompt": "Q", "completion": "A response", "rubric": ["<sure>"]}
        )
        assert judged.status_code == 200 and judged.json()["score"] == 0.25
        missing = httpx.post(f"{server.url}/judge", json={"prompt": "Q", "completion": "A response"})
        assert missing.status_code == 422 and "rubric: this judge's template reads a rubric" in missing.text
        batch = [{"prompt": "Q", "completion": "A", "rubric": "<sure>"}, {"prompt": "Q", "completion": "B"}]
        refused = httpx.post(f"{server.url}/batch_judge", json={"requests": batch})
        assert refused.status_code == 422 and "requests[1].rubric" in refused.text
        assert httpx.get(f"{server.url}/health").json()["reads_rubric"] is True
        openrlhf_rewards(server.url)
        client_rewards(server.url)
    with start_server(["--judge", "rule"], tmp_path / "rule.log") as rule_server:
        unread = httpx.post(f"{rule_server.url}/judge", json={"prompt": "Q", "completion": "4", "rubric": "exact"})
        assert unread.status_code == 422 and "rubric: this judge has no place for a rubric" in unread.text


def openrlhf_rewards(url: str) -> None:
    """OpenRLHF posts the dataset's label column as it is: a label object brings the rubric, a plain one cannot."""
    prompt = "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    body = {"query": [prompt + "A response<|im_end|>"], "prompts": [prompt]}
    labeled = httpx.post(f"{url}/openrlhf/reward", json={**body, "labels": [{"rubric": ["<sure>"]}]})
    assert labeled.status_code == 200 and labeled.json()["rewards"] == [0.25]
    plain = httpx.post(f"{url}/openrlhf/reward", json={**body, "labels": ["4"]})
    assert plain.status_code == 422 and "labels[0].rubric: this judge's template reads a rubric" in plain.text


def client_rewards(url: str) -> None:
    """The client sends the rubric and keys its cache on it; verl's extra_info and TRL's column bring it."""
    with JudgeRewardSystem({"judge_url": url, "max_retries": 0, "batch_timeout": 0.01}) as system:
        sure = system.reward("Q", "A response", rubric="<sure>")
        again = system.reward("Q", "A response", rubric="<sure>")
        assert (sure["reward"], sure["source"], again["source"]) == (0.25, "judge", "cache")
        with pytest.raises(JudgeUnavailableError, match=r"score 7 is outside the template's range"):
            system.reward("Q", "A response", rubric="<sure> <bad>")  # another rubric: judged, not the cached 0.25
    (row,) = verl_reward.compute_score_batch(
        ["mine"],
        ["A response"],
        [None],
        [{"question": "Q", "rubric": ["<sure>"]}],
        judge_url=url,
        fallback_to_rule=False,
    )
    assert row["score"] == 0.25
    reward = JudgeReward({"judge_url": url}, answer_column=None, rubric_column="rubric")
    assert reward(["Q", "Q"], ["A response", "A response"], rubric=["<sure>", "<sure>"]) == [0.25, 0.25]


def test_a_pairwise_template_compares_in_both_orders_with_the_rubric_it_reads(pairwise_judge_dir, tmp_path):  # noqa: F811
    path = tmp_path / "pairwise.yaml"
    path.write_text(PAIRWISE)
    judge = load_judge(
        JudgeConfig(model=str(pairwise_judge_dir), judge_template=str(path), score_mode="sample", max_new_tokens=8)
    )
    assert (judge.identity.kind, judge.identity.reads_rubric) == ("pairwise", True)
    better, split, unruled = judge.compare_batch(
        [
            ComparisonItem("Q", "It is 4. <good>", "It is 5. <bad>", "exact"),
            ComparisonItem("Q", "It is 4. <good>", "Four. <good>", "exact"),  # A in both orders: by position
            ComparisonItem("Q", "It is 4. <good>", "It is 5. <bad>"),
        ]
    )
    assert (better.score, better.metadata["orders_agree"]) == (1.0, True)
    assert (split.score, split.metadata["orders_agree"]) == (0.5, False)
    assert unruled.score is None and "reads a rubric ({rubric})" in unruled.error
    with_reference, without = judge.score_batch(
        [JudgeItem("Q", "It is 5. <bad>", answer="It is 4. <good>", rubric="exact"), JudgeItem("Q", "4", rubric="x")]
    )
    assert with_reference.score == 0.0 and "reference `answer`" in without.error
    with start_server(
        ["--model", str(pairwise_judge_dir), "--judge-template", str(path), "--score-mode", "sample"],
        tmp_path / "server.log",
    ) as server:
        body = {"prompt": "Q", "completions": ["a <bad>", "b <good>", "c <bad>"], "rubric": ["exact"]}
        rewards = httpx.post(f"{server.url}/judge_group", json=body, timeout=60).json()["rewards"]
        assert [reward["score"] for reward in rewards] == [0.25, 1.0, 0.25]  # bad vs bad: split by position
        unread = httpx.post(f"{server.url}/compare", json={"prompt": "Q", "response_a": "a", "response_b": "b"})
        assert unread.status_code == 422 and "rubric: this judge's template reads a rubric" in unread.text


def test_a_template_for_a_judge_without_a_prompt_is_refused(tiny_scalar_judge_dir, template):
    with pytest.raises(ValueError, match=r"--judge-template is for generative judges; .* is a scalar judge"):
        load_judge(JudgeConfig(model=str(tiny_scalar_judge_dir), judge_template=str(template)))
    with pytest.raises(ValueError, match=r"--judge-template is for generative judges; --judge rule has no prompt"):
        load_judge(JudgeConfig(judge="rule", judge_template=str(template)))
