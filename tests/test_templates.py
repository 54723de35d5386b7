import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judge_core.protocol import templates as t


@pytest.mark.parametrize(
    "text, value",
    [
        ("<think>fine</think><score>3</score>", 3),
        ("<think>a\nb</think>\n<score> 0 </score>\n", 0),
        ("<score>4</score>", 4),  # reasoning is optional for parsing; rewards check has_think
        ("<think>I first thought <score>1</score></think><score>2</score>", 2),  # tags in think ignored
        ("\n<think>x</think>\n\n<score>1</score> and that is all", 1),
    ],
)
def test_parse_pointwise_accepts(text, value):
    judgement = t.parse_pointwise(text)
    assert judgement.ok, judgement.error
    assert judgement.value == value


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "no <score>"),
        ("<think>unfinished <score>3</score>", "never closed"),
        ("<think>x</think>", "no <score>"),
        ("<think>x <score>3</score></think>", "no <score>"),  # only inside the reasoning
        ("<think>x</think><score>3</score><score>4</score>", "2 <score> and 2 </score> tags"),
        ("<think>x</think><score>3</score><score>", "2 <score> and 1 </score> tags"),
        ("<think>x</think><score>7</score>", "outside 0..4"),
        ("<think>x</think><score>10</score>", "outside 0..4"),
        ("<think>x</think><score>" + "9" * 100_000 + "</score>", "outside 0..4"),
        ("<think>x</think><score>-1</score>", "not a plain integer"),
        ("<think>x</think><score>3.5</score>", "not a plain integer"),
        ("<think>x</think><score>three</score>", "not a plain integer"),
        ("<think>x</think><score></score>", "not a plain integer"),
        ("<think>x</think><score>\uff13</score>", "not a plain integer"),  # full-width 3
        ("<think>x</think><score>\u0663</score>", "not a plain integer"),  # Arabic-Indic 3
        ("<think>x</think><score>+3</score>", "not a plain integer"),
        ("<think>x</think><score>-0</score>", "not a plain integer"),
        ("<think>x</think><score>03</score>", "not a plain integer"),
        ("<think>x</think><score>3 4</score>", "not a plain integer"),
        ("<think>x</think><score>\u30003</score>", "not a plain integer"),  # ideographic space is not ASCII
        ("<think>x</think><score>\xa03\xa0</score>", "not a plain integer"),  # nor is a no-break space
        ("<think>x</think><score>3</score></score>", "1 <score> and 2 </score> tags"),
        ("<think>x</think></score><score>3</score>", "1 <score> and 2 </score> tags"),
        ("<think>x</think></score>3<score>", "</score> before <score>"),
        ("<think>a</think><think>b <score>3</score>", "never closed"),  # the score stands in an open block
        ("<think>" + "blah " * 200_000 + "</think>", "no <score>"),
    ],
)
def test_parse_pointwise_rejects(text, reason):
    judgement = t.parse_pointwise(text)
    assert not judgement.ok and judgement.value is None
    assert reason in judgement.error


def test_parse_pointwise_rejects_non_text():
    assert "not text" in t.parse_pointwise(None).error


@pytest.mark.parametrize(
    "text, reasoning",
    [
        ("<think>fine</think><score>3</score>", "fine"),
        ("<think></think><score>3</score>", ""),
        ("\n <think>\nstep 1\nstep 2\n</think>\n<score>3</score>", "step 1\nstep 2"),
    ],
)
def test_a_well_formed_think_block_is_the_reasoning(text, reasoning):
    judgement = t.parse_pointwise(text)
    assert (judgement.value, judgement.has_think, judgement.reasoning) == (3, True, reasoning)


@pytest.mark.parametrize(
    "text",
    [
        "</think><score>3</score>",  # closed but never opened
        "so it is good</think><score>3</score>",
        "Sure! <think>fine</think><score>3</score>",  # text before the block
        "<think>a</think><think>b</think><score>3</score>",  # two blocks
        "<think>a <think>b</think><score>3</score>",  # opened twice
        "<think>a</think>b</think><score>3</score>",  # closed twice
        "<THINK>a</think><score>3</score>",
    ],
)
def test_only_a_well_formed_think_block_counts_as_reasoning(text):
    """The answer after the last </think> still counts; the think credit needs exactly `<think>..</think>`."""
    judgement = t.parse_pointwise(text)
    assert (judgement.value, judgement.has_think, judgement.reasoning) == (3, False, None)
    pairwise = t.parse_pairwise(text.replace("<score>3</score>", "<better>B</better>"))
    assert (pairwise.value, pairwise.has_think) == ("B", False)


_ASCII_WHITESPACE = " \t\n\r\x0b\x0c"
# Characters a lenient parser would accept as (parts of) a value: digits and letters of other scripts,
# signs, Unicode spaces and separators; mixed with any character but the tag's "<".
_LOOKALIKES = "0123456789+-.ABab \t\n\x0b\x1c\x85\xa0\u2003\u3000\uff10\uff13\uff21\u0663\u0410\U0001d7d1"
_VALUE_TEXT = st.text(st.sampled_from(_LOOKALIKES), max_size=3) | st.text(st.characters(exclude_characters="<"))


@settings(max_examples=300, deadline=None)
@given(_VALUE_TEXT)
def test_a_score_parses_only_as_one_plain_ascii_digit_in_range(value):
    judgement = t.parse_pointwise(f"<think>r</think><score>{value}</score>")
    expected = value.strip(_ASCII_WHITESPACE)
    if expected in {"0", "1", "2", "3", "4"}:
        assert judgement.value == int(expected)
    else:
        assert judgement.value is None and judgement.error


@settings(max_examples=300, deadline=None)
@given(_VALUE_TEXT)
def test_a_verdict_parses_only_as_an_ascii_capital_a_or_b(value):
    judgement = t.parse_pairwise(f"<think>r</think><better>{value}</better>")
    expected = value.strip(_ASCII_WHITESPACE)
    if expected in {"A", "B"}:
        assert judgement.value == expected
    else:
        assert judgement.value is None and judgement.error


def test_parse_pointwise_huge_valid_answer():
    judgement = t.parse_pointwise("<think>" + "x" * 1_000_000 + "</think><score>1</score>")
    assert judgement.value == 1 and judgement.has_think


@pytest.mark.parametrize(
    "text, value",
    [("<think>.</think><better>A</better>", "A"), ("<better> B </better>", "B"), ("<better>\tA\r\n</better>", "A")],
)
def test_parse_pairwise_accepts(text, value):
    assert t.parse_pairwise(text).value == value


@pytest.mark.parametrize(
    "text, reason",
    [
        ("<think>.</think><better>C</better>", "not one of"),
        ("<think>.</think><better>a</better>", "not one of"),
        ("<think>.</think><better>b</better>", "not one of"),
        ("<think>.</think><better>\uff21</better>", "not one of"),  # full-width A
        ("<think>.</think><better>\u0410</better>", "not one of"),  # Cyrillic A
        ("<think>.</think><better>\u3000B\u3000</better>", "not one of"),  # ideographic spaces
        ("<think>.</think><better>A B</better>", "not one of"),
        ("<think>.</think><better>A.</better>", "not one of"),
        ("<think>.</think><better>A</better></better>", "1 <better> and 2 </better> tags"),
        ("<think>a</think><think>b <better>A</better>", "never closed"),
        ("<think>.</think><better>A</better><better>B</better>", "2 <better> and 2 </better> tags"),
        ("<think><better>A</better></think>", "no <better>"),
        ("<think>.</think><score>3</score>", "no <better>"),
    ],
)
def test_parse_pairwise_rejects(text, reason):
    assert reason in t.parse_pairwise(text).error


def test_prompts_embed_the_conversation_and_answer_format():
    conversation = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "2+2?"},
    ]
    [message] = t.pointwise_messages(conversation, "4", reference="4")
    assert message["role"] == "user"
    for piece in (
        "[User]\nHi",
        "[Assistant]\nHello",
        "## Response to rate\n4",
        "## Reference answer\n4",
        "<score>N</score>",
    ):
        assert piece in message["content"]
    [pair] = t.pairwise_messages("2+2?", "4", "5")
    assert "## Response A\n4" in pair["content"] and "## Response B\n5" in pair["content"]
    assert "<better>A</better>" in pair["content"]


@given(st.text(), st.text(), st.text())
@settings(max_examples=200, deadline=None)
def test_split_pairwise_prompt_gives_back_the_responses_or_none(question, response_a, response_b):
    [pair] = t.pairwise_messages(question, response_a, response_b)
    split = t.split_pairwise_prompt(f"<|user|>{pair['content']}<|assistant|>")  # as a chat template renders it
    assert split is None or split[1:] == (response_a, response_b)
    if not any(quoted in question + response_a + response_b for quoted in ("## Response", "First reason")):
        assert split is not None


def test_split_pairwise_prompt_of_a_quoted_heading_or_another_prompt_is_none():
    [pair] = t.pairwise_messages("2+2?", "4\n\n## Response B\n5", "5")
    assert t.split_pairwise_prompt(pair["content"]) is None
    [pointwise] = t.pointwise_messages("2+2?", "4")
    assert t.split_pairwise_prompt(pointwise["content"]) is None


def test_conversation_messages_and_validation():
    assert t.conversation_messages("q", "a") == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]
    with pytest.raises(ValueError, match="message 0"):
        t.as_messages([{"role": "robot", "content": "x"}])


def test_conversation_token_ids_are_the_chat_template_text_without_added_tokens(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    conversations = [t.conversation_messages("q", "a"), t.conversation_messages("a longer question", "its answer")]
    ids = t.conversation_token_ids(tokenizer, conversations)
    texts = [tokenizer.decode(one) for one in ids]
    assert texts == [tokenizer.apply_chat_template(messages, tokenize=False) for messages in conversations]
    assert texts[0].rstrip().endswith("a<|im_end|>")  # no generation prompt: the reward is read at the turn's end


@pytest.mark.parametrize(
    ("reasoning", "recalled"),
    [
        ("The correct answer is 22; it answers 12, which is wrong.", "22"),
        ("3 + 19 = 22, so the correct answer is 22; it answers 22, which is correct.", "22"),
        ("The correct answer is blue whale.", "blue whale"),
        ("The correct answer is  Jakarta ; the correct answer is Bali.", "Jakarta"),
        ("It answers 12, which is wrong.", None),
        ("The correct answer is ; it answers 12.", None),
        ("The correct answer is", None),
    ],
)
def test_recalled_answer_is_the_value_after_the_first_statement_of_it(reasoning, recalled):
    assert t.recalled_answer(reasoning) == recalled


def test_same_answer_ignores_case_and_surrounding_whitespace_only():
    assert t.same_answer(" Jakarta", "jakarta ")
    assert not t.same_answer("22.0", "22") and not t.same_answer("Jakart", "Jakarta")


def test_normalized_score():
    assert [t.normalized_score(s) for s in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_ground_truth_roundtrip_and_validation():
    assert t.read_ground_truth(t.pointwise_ground_truth(3)) == {"score": 3}
    assert t.read_ground_truth(t.pairwise_ground_truth("B")) == {"better": "B"}
    assert t.read_ground_truth(t.pointwise_ground_truth(0, "São Paulo")) == {"score": 0, "answer": "São Paulo"}
    neither = 'is neither {"score": N}'
    bad = {
        '{"score": 5}': "pointwise label 5 is not an integer in 0..4",
        '{"score": "3"}': "pointwise label '3' is not an integer in 0..4",
        '{"better": "C"}': "pairwise label 'C' is not one of ('A', 'B', 'tie')",
        '{"score": 1, "better": "A"}': neither,
        "3": neither,
        None: "ground truth None is not JSON",
        '{"score": 1, "answer": ""}': "pointwise correct answer '' is not a non-empty string",
        '{"score": 1, "answer": 22}': "pointwise correct answer 22 is not a non-empty string",
        '{"score": 1, "answer": "2", "x": 1}': neither,
    }
    for ground_truth, message in bad.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            t.read_ground_truth(ground_truth)
    with pytest.raises(ValueError, match="0..4"):
        t.pointwise_ground_truth(9)
    with pytest.raises(ValueError, match="pointwise label True is not an integer in 0..4"):
        t.pointwise_ground_truth(True)
