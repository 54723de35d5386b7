import pytest

from judge_rewards.protocol import templates as t


@pytest.mark.parametrize(
    "text, value",
    [
        ("<think>fine</think><score>3</score>", 3),
        ("<think>a\nb</think>\n<score> 0 </score>\n", 0),
        ("<score>4</score>", 4),  # reasoning is optional for parsing; rewards check has_think
        ("<think>I first thought <score>1</score></think><score>2</score>", 2),  # tags in think ignored
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
        ("<think>x</think><score>3</score><score>4</score>", "2 <score> tags"),
        ("<think>x</think><score>3</score><score>", "2 <score> tags"),
        ("<think>x</think><score>7</score>", "outside 0..4"),
        ("<think>x</think><score>-1</score>", "outside 0..4"),
        ("<think>x</think><score>3.5</score>", "not an integer"),
        ("<think>x</think><score>three</score>", "not an integer"),
        ("<think>x</think><score></score>", "not an integer"),
        ("<think>" + "blah " * 200_000 + "</think>", "no <score>"),
    ],
)
def test_parse_pointwise_rejects(text, reason):
    judgement = t.parse_pointwise(text)
    assert not judgement.ok and judgement.value is None
    assert reason in judgement.error


def test_parse_pointwise_rejects_non_text():
    assert "not text" in t.parse_pointwise(None).error


def test_parse_pointwise_huge_valid_answer():
    judgement = t.parse_pointwise("<think>" + "x" * 1_000_000 + "</think><score>1</score>")
    assert judgement.value == 1 and judgement.has_think


@pytest.mark.parametrize("text, value", [("<think>.</think><better>A</better>", "A"), ("<better> B </better>", "B")])
def test_parse_pairwise_accepts(text, value):
    assert t.parse_pairwise(text).value == value


@pytest.mark.parametrize(
    "text, reason",
    [
        ("<think>.</think><better>C</better>", "not one of"),
        ("<think>.</think><better>a</better>", "not one of"),
        ("<think>.</think><better>A</better><better>B</better>", "2 <better> tags"),
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


def test_normalized_score():
    assert [t.normalized_score(s) for s in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_ground_truth_roundtrip_and_validation():
    assert t.read_ground_truth(t.pointwise_ground_truth(3)) == {"score": 3}
    assert t.read_ground_truth(t.pairwise_ground_truth("B")) == {"better": "B"}
    for bad in ('{"score": 5}', '{"score": "3"}', '{"better": "C"}', '{"score": 1, "better": "A"}', "3", None):
        with pytest.raises(ValueError):
            t.read_ground_truth(bad)
    with pytest.raises(ValueError, match="0..4"):
        t.pointwise_ground_truth(9)
    with pytest.raises(ValueError):
        t.pointwise_ground_truth(True)
