"""HelpSteer2 conversion on stand-in files of the upstream schema (ratings files and preference file)."""

import gzip
import json
import re

import pandas as pd
import pyarrow.parquet as pq
import pytest

from data_prep import cli, helpsteer2, outputs
from data_prep.records import DataError, UsageError
from judge_core.protocol import templates

MULTI_TURN = "Hi there\n<extra_id_1>Assistant\nHello! How can I help?\n<extra_id_1>User\nName a primary color."
MULTI_TURN_MESSAGES = [
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "Name a primary color."},
]


def rating(prompt, response, helpfulness, correctness, coherence=4, complexity=1, verbosity=1):
    return {
        "prompt": prompt,
        "response": response,
        "helpfulness": helpfulness,
        "correctness": correctness,
        "coherence": coherence,
        "complexity": complexity,
        "verbosity": verbosity,
    }


def preference(split, prompt, response_1, response_2, strength):
    return {
        "split": split,
        "prompt": prompt,
        "response_1": response_1,
        "response_2": response_2,
        "preference_strength": strength,
        "preference_statement": "@Response 1 is better.",
        "preference_elaboration": "Because.",
    }


TRAIN = [
    rating("What is 2+2?", "2+2 is 4.", 4, 4),
    rating("What is 2+2?", "2+2 is 5.", 0, 0, coherence=3, complexity=0, verbosity=2),
    rating(MULTI_TURN, "Red.", 3, 4, coherence=2, complexity=3, verbosity=0),
    rating(MULTI_TURN, "Purple.", 2, 3),
    rating("Hello\n<extra_id_1>Robot\nbeep", "Hi.", 2, 4),
]
VALIDATION = [rating("Capital of France?", "Paris.", 4, 4)]
PREFERENCES = [
    preference("train", "What is 2+2?", "2+2 is 4.", "2+2 is 5.", -2),
    preference("train", "Say hi.", "Bye.", "Hi!", 3),
    preference("train", "Say hi.", "Hello.", "Hi.", 0),
    preference("train", "Name a fruit.", "Apple.", "A chair.", -1),
    preference("val", MULTI_TURN, "Purple.", "Red.", 1),
]


def write_jsonl_gz(path, rows, raw_lines=()):
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
        for line in raw_lines:
            handle.write(line + "\n")
    return path


@pytest.fixture
def upstream(tmp_path):
    (tmp_path / "preference").mkdir()
    return {
        "train": write_jsonl_gz(tmp_path / "train.jsonl.gz", TRAIN),
        "validation": write_jsonl_gz(tmp_path / "validation.jsonl.gz", VALIDATION),
        "preference": write_jsonl_gz(tmp_path / "preference" / "preference.jsonl.gz", PREFERENCES),
    }


def convert(upstream, out, **config):
    sources = helpsteer2.Sources.from_files(upstream["train"], upstream["validation"], upstream["preference"])
    return helpsteer2.convert(sources, out, helpsteer2.HelpSteer2Config(**config))


def read(out, name):
    return pd.read_parquet(out / name).to_dict("records")


def plain(value):
    """Parquet list/struct values (numpy arrays) as plain Python lists and dicts."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist()))


def test_multi_turn_prompts_become_messages():
    assert helpsteer2.prompt_messages(MULTI_TURN) == MULTI_TURN_MESSAGES
    assert helpsteer2.prompt_messages("Just one turn\nwith two lines") == [
        {"role": "user", "content": "Just one turn\nwith two lines"}
    ]
    not_alternating = "turns do not alternate user/assistant ending with a user turn"
    for broken, message in (
        ("Hi\n<extra_id_1>Robot\nbeep", "a turn marker is not followed by 'User' or 'Assistant' and a newline"),
        ("Hi\n<extra_id_1>Assistant\nHello", not_alternating),
        ("Hi\n<extra_id_1>User\nAgain", not_alternating),
    ):
        with pytest.raises(helpsteer2.PromptFormatError, match=re.escape(message)):
            helpsteer2.prompt_messages(broken)


def test_sft_keeps_correct_responses_as_message_lists(upstream, tmp_path):
    summary = convert(upstream, tmp_path / "out")
    train = [plain(row["messages"]) for row in read(tmp_path / "out", "sft/train.parquet")]
    assert train == [
        [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "2+2 is 4."}],
        MULTI_TURN_MESSAGES + [{"role": "assistant", "content": "Red."}],
    ]
    assert [plain(row["messages"]) for row in read(tmp_path / "out", "sft/val.parquet")] == [
        [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."}]
    ]
    assert summary.skipped[("sft", "correctness below 4")] == 2
    assert (
        summary.skipped[
            (
                "sft",
                "prompt not parsable as turns (a turn marker is not followed by 'User' or 'Assistant' and a newline)",
            )
        ]
        == 1
    )


def test_sft_threshold_is_a_setting(upstream, tmp_path):
    convert(upstream, tmp_path / "out", sft_min_correctness=3)
    assert len(read(tmp_path / "out", "sft/train.parquet")) == 3


def test_pointwise_rows_rate_every_response_with_its_helpfulness(upstream, tmp_path):
    convert(upstream, tmp_path / "out")
    rows = read(tmp_path / "out", "grpo/pointwise/train.parquet")
    expected = [
        ("What is 2+2?", "2+2 is 4.", 4),
        ("What is 2+2?", "2+2 is 5.", 0),
        (MULTI_TURN_MESSAGES, "Red.", 3),
        (MULTI_TURN_MESSAGES, "Purple.", 2),
    ]
    assert len(rows) == len(expected)
    for index, (row, (prompt, response, score)) in enumerate(zip(rows, expected, strict=True)):
        assert row["data_source"] == "helpsteer2/pointwise"
        assert row["ability"] == "judge"
        assert plain(row["prompt"]) == templates.pointwise_messages(prompt, response)
        assert row["reward_model"] == {"style": "rule", "ground_truth": templates.pointwise_ground_truth(score)}
        raw_prompt = TRAIN[index]["prompt"]
        assert row["extra_info"] == {
            "split": "train",
            "index": index,
            "prompt_id": helpsteer2.prompt_id(raw_prompt),
            "subset": "single_turn" if isinstance(prompt, str) else "multi_turn",
            "source": f"train.jsonl.gz line {index + 1}",
        }
    val = read(tmp_path / "out", "grpo/pointwise/val.parquet")
    assert [templates.read_ground_truth(r["reward_model"]["ground_truth"]) for r in val] == [{"score": 4}]
    assert val[0]["extra_info"]["split"] == "val"


def test_attribute_rows_keep_every_rated_response_with_its_five_attributes(upstream, tmp_path):
    convert(upstream, tmp_path / "out")
    table = pq.read_table(tmp_path / "out" / "attributes" / "train.parquet")
    assert table.schema.names == ["conversation", *outputs.ATTRIBUTE_NAMES]
    assert all(str(table.schema.field(name).type) == "double" for name in outputs.ATTRIBUTE_NAMES)
    rows = table.to_pylist()
    expected_prompts = ["What is 2+2?", "What is 2+2?", MULTI_TURN_MESSAGES, MULTI_TURN_MESSAGES]
    assert len(rows) == len(expected_prompts)  # the fifth rating's prompt does not parse as turns
    for row, rating_, prompt in zip(rows, TRAIN, expected_prompts, strict=False):
        assert json.loads(row.pop("conversation")) == templates.conversation_messages(prompt, rating_["response"])
        assert row == {name: float(rating_[name]) for name in outputs.ATTRIBUTE_NAMES}
    val = read(tmp_path / "out", "attributes/val.parquet")
    assert json.loads(val[0]["conversation"])[-1] == {"role": "assistant", "content": "Paris."}


def test_bradley_terry_orders_pairs_by_the_sign_and_keeps_the_strength(upstream, tmp_path):
    summary = convert(upstream, tmp_path / "out")
    rows = read(tmp_path / "out", "bradley_terry/train.parquet")
    expected = [
        ("What is 2+2?", "2+2 is 4.", "2+2 is 5.", 2.0),
        ("Say hi.", "Hi!", "Bye.", 3.0),
        ("Name a fruit.", "Apple.", "A chair.", 1.0),
    ]
    assert len(rows) == len(expected)
    for row, (prompt, chosen, rejected, margin) in zip(rows, expected, strict=True):
        assert json.loads(row["chosen"]) == templates.conversation_messages(prompt, chosen)
        assert json.loads(row["rejected"]) == templates.conversation_messages(prompt, rejected)
        assert row["margin"] == margin
    val = read(tmp_path / "out", "bradley_terry/val.parquet")
    assert [json.loads(r["chosen"]) for r in val] == [MULTI_TURN_MESSAGES + [{"role": "assistant", "content": "Red."}]]
    assert summary.skipped[("bradley_terry", "tie (preference_strength 0)")] == 1
    assert summary.skipped[("grpo/pairwise", "tie (preference_strength 0)")] == 1


def test_minimum_strength_is_a_setting(upstream, tmp_path):
    summary = convert(upstream, tmp_path / "out", min_strength=2)
    assert len(read(tmp_path / "out", "bradley_terry/train.parquet")) == 2
    assert summary.skipped[("bradley_terry", "|preference_strength| below 2")] == 2


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"min_strength": 0}, r"the minimum \|preference_strength\| must be 1-3, got 0"),
        ({"min_strength": 4}, r"the minimum \|preference_strength\| must be 1-3, got 4"),
        ({"sft_min_correctness": 5}, "the SFT correctness threshold must be 0-4, got 5"),
    ],
)
def test_thresholds_outside_the_scales_are_refused(settings, message):
    with pytest.raises(UsageError, match=message):
        helpsteer2.HelpSteer2Config(**settings)


def test_pairwise_rows_balance_positions_and_label_the_better_one(upstream, tmp_path):
    convert(upstream, tmp_path / "out")
    rows = read(tmp_path / "out", "grpo/pairwise/train.parquet")
    expected = [
        ("What is 2+2?", "2+2 is 4.", "2+2 is 5."),
        ("Say hi.", "Hi!", "Bye."),
        ("Name a fruit.", "Apple.", "A chair."),
    ]
    labels = []
    for row, (prompt, chosen, rejected) in zip(rows, expected, strict=True):
        better = templates.read_ground_truth(row["reward_model"]["ground_truth"])["better"]
        a, b = (chosen, rejected) if better == "A" else (rejected, chosen)
        assert plain(row["prompt"]) == templates.pairwise_messages(prompt, a, b)
        assert row["data_source"] == "helpsteer2/pairwise"
        labels.append(better)
    assert sorted(labels) == ["A", "B", "B"]  # 3 pairs: one A, two B


def test_pairwise_positions_follow_the_seed(upstream, tmp_path):
    def labels(seed):
        convert(upstream, tmp_path / f"out{seed}", seed=seed)
        rows = read(tmp_path / f"out{seed}", "grpo/pairwise/train.parquet")
        return tuple(templates.read_ground_truth(r["reward_model"]["ground_truth"])["better"] for r in rows)

    assert labels(0) == labels(0)
    assert len({labels(seed) for seed in range(8)}) > 1


def test_parquet_inputs_convert_like_jsonl(upstream, tmp_path):
    parquet = {}
    for name, path in upstream.items():
        parquet[name] = tmp_path / f"{name}.parquet"
        pd.read_json(path, lines=True).to_parquet(parquet[name])
    convert(upstream, tmp_path / "from_jsonl")
    convert(parquet, tmp_path / "from_parquet")
    for name in ("sft/train.parquet", "bradley_terry/train.parquet"):
        assert pd.read_parquet(tmp_path / "from_jsonl" / name).equals(pd.read_parquet(tmp_path / "from_parquet" / name))
    from_jsonl = plain(read(tmp_path / "from_jsonl", "grpo/pointwise/train.parquet"))
    from_parquet = plain(read(tmp_path / "from_parquet", "grpo/pointwise/train.parquet"))
    assert [row["extra_info"].pop("source") for row in from_parquet] == [f"train.parquet row {n}" for n in range(1, 5)]
    for row in from_jsonl:
        row["extra_info"].pop("source")
    assert from_jsonl == from_parquet


def test_cli_prints_rows_written_and_skipped(upstream, tmp_path, capsys):
    cli.main(
        [
            "helpsteer2",
            "--train",
            str(upstream["train"]),
            "--validation",
            str(upstream["validation"]),
            "--preference",
            str(upstream["preference"]),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    first_line, *rest = capsys.readouterr().out.splitlines()
    assert first_line == f"helpsteer2: wrote 21 rows under {tmp_path / 'out'}"
    not_turns = "prompt not parsable as turns (a turn marker is not followed by 'User' or 'Assistant' and a newline)"
    assert rest == [
        "  attributes/train.parquet            4 rows",
        "  attributes/val.parquet              1 rows",
        "  bradley_terry/train.parquet         3 rows",
        "  bradley_terry/val.parquet           1 rows",
        "  grpo/pairwise/train.parquet         3 rows",
        "  grpo/pairwise/val.parquet           1 rows",
        "  grpo/pointwise/train.parquet        4 rows",
        "  grpo/pointwise/val.parquet          1 rows",
        "  sft/train.parquet                   2 rows",
        "  sft/val.parquet                     1 rows",
        "skipped:",
        f"  attributes: {not_turns}: 1",
        "  bradley_terry: tie (preference_strength 0): 1",
        "  grpo/pairwise: tie (preference_strength 0): 1",
        f"  grpo/pointwise: {not_turns}: 1",
        "  sft: correctness below 4: 2",
        f"  sft: {not_turns}: 1",
    ]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("helpfulness", "x", "train.jsonl.gz line 2: field 'helpfulness' must be an int 0-4, got 'x'"),
        ("correctness", 5, "train.jsonl.gz line 2: field 'correctness' must be an int 0-4, got 5"),
        ("verbosity", True, "train.jsonl.gz line 2: field 'verbosity' must be an int 0-4, got True"),
        ("response", None, "train.jsonl.gz line 2: field 'response' must be a string, got None"),
    ],
)
def test_a_bad_rating_names_file_line_and_field(upstream, tmp_path, field, value, message):
    bad = dict(TRAIN[1], **{field: value})
    write_jsonl_gz(upstream["train"], [TRAIN[0], bad])
    with pytest.raises(DataError, match=f"^{re.escape(message)}$"):
        convert(upstream, tmp_path / "out")


def test_a_missing_field_and_bad_preferences_are_errors(upstream, tmp_path):
    row = {k: v for k, v in TRAIN[0].items() if k != "coherence"}
    write_jsonl_gz(upstream["train"], [row])
    with pytest.raises(
        DataError,
        match=r"^train.jsonl.gz line 1: field 'coherence' must be an int 0-4, "
        r"got nothing \(the field is missing\)$",
    ):
        convert(upstream, tmp_path / "out")
    write_jsonl_gz(upstream["train"], TRAIN)
    write_jsonl_gz(upstream["preference"], [dict(PREFERENCES[0], preference_strength=4)])
    with pytest.raises(
        DataError,
        match=r"^preference.jsonl.gz line 1: field 'preference_strength' must be "
        r"an int from -3 to 3, got 4$",
    ):
        convert(upstream, tmp_path / "out")
    write_jsonl_gz(upstream["preference"], [PREFERENCES[0], dict(PREFERENCES[0], split="test")])
    with pytest.raises(
        DataError,
        match=r"^preference.jsonl.gz line 2: field 'split' must be one of 'train', "
        r"'val', got 'test'$",
    ):
        convert(upstream, tmp_path / "out")


def test_empty_responses_are_skipped_and_counted(upstream, tmp_path):
    write_jsonl_gz(upstream["train"], [TRAIN[0], dict(TRAIN[0], response=" ")])
    write_jsonl_gz(upstream["preference"], [PREFERENCES[0], dict(PREFERENCES[0], response_2="")])
    summary = convert(upstream, tmp_path / "out")
    assert summary.written["grpo/pointwise/train.parquet"] == 1
    assert summary.written["bradley_terry/train.parquet"] == 1
    assert {key: count for key, count in summary.skipped.items() if "empty" in key[1]} == {
        ("sft", "empty response"): 1,
        ("grpo/pointwise", "empty response"): 1,
        ("attributes", "empty response"): 1,
        ("bradley_terry", "empty response"): 1,
        ("grpo/pairwise", "empty response"): 1,
    }


def test_a_bad_row_in_the_last_file_writes_nothing(upstream, tmp_path):
    write_jsonl_gz(upstream["preference"], [PREFERENCES[0], dict(PREFERENCES[0], preference_strength="strong")])
    with pytest.raises(DataError, match="^preference.jsonl.gz line 2: field 'preference_strength'"):
        convert(upstream, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_line_that_is_not_json_is_an_error(upstream, tmp_path):
    write_jsonl_gz(upstream["validation"], VALIDATION, raw_lines=['{"prompt": "cut'])
    with pytest.raises(DataError, match=r"^validation.jsonl.gz line 2: not valid JSON"):
        convert(upstream, tmp_path / "out")


def test_cli_reports_a_bad_file_without_a_traceback(upstream, tmp_path):
    write_jsonl_gz(upstream["train"], [dict(TRAIN[0], helpfulness="x")])
    message = "helpsteer2: train.jsonl.gz line 1: field 'helpfulness' must be an int 0-4, got 'x'"
    with pytest.raises(SystemExit, match=f"^{re.escape(message)}$"):  # the message, no traceback
        cli.main(
            [
                "helpsteer2",
                "--train",
                str(upstream["train"]),
                "--validation",
                str(upstream["validation"]),
                "--preference",
                str(upstream["preference"]),
                "--out",
                str(tmp_path / "out"),
            ]
        )


def without_source(path):
    rows = pq.read_table(path).to_pylist()
    for row in rows:
        row.pop("source", None)
        if isinstance(row.get("extra_info"), dict):
            row["extra_info"].pop("source", None)
    return rows


def test_hub_reads_the_three_upstream_splits(monkeypatch, tmp_path):
    """The real `datasets.load_dataset` path, offline, on a local copy of nvidia/HelpSteer2's layout (a local
    directory of the hub name wins over the hub): the ratings splits by file name at the top, the preference
    file in preference/, and disagreements/ that must not leak into any split. A wrong split name, data_dir
    or column finds nothing, mixes files up or fails."""
    import datasets

    repo = tmp_path / "hub" / "nvidia" / "HelpSteer2"
    for folder in ("preference", "disagreements"):
        (repo / folder).mkdir(parents=True)
    (repo / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# HelpSteer2 (test stand-in)\n")
    write_jsonl_gz(repo / "train.jsonl.gz", TRAIN)
    write_jsonl_gz(repo / "validation.jsonl.gz", VALIDATION)
    write_jsonl_gz(repo / "preference" / "preference.jsonl.gz", PREFERENCES)
    write_jsonl_gz(repo / "disagreements" / "disagreements.jsonl.gz", [{**TRAIN[0], "disagreement": 1}])
    monkeypatch.chdir(tmp_path / "hub")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets_cache")

    summary = helpsteer2.convert(helpsteer2.Sources.from_hub("nvidia/HelpSteer2"), tmp_path / "out")
    local = helpsteer2.convert(
        helpsteer2.Sources.from_files(
            repo / "train.jsonl.gz", repo / "validation.jsonl.gz", repo / "preference" / "preference.jsonl.gz"
        ),
        tmp_path / "from_files",
    )
    assert summary.written == local.written
    assert summary.written["bradley_terry/train.parquet"] == 3
    for name in summary.written:  # the same rows as from the files, but for where each says it came from
        assert without_source(tmp_path / "out" / name) == without_source(tmp_path / "from_files" / name), name
    pointwise = read(tmp_path / "out", "grpo/pointwise/train.parquet")
    assert pointwise[0]["extra_info"]["source"] == "nvidia/HelpSteer2[train] row 1"
    pairwise_val = read(tmp_path / "out", "grpo/pairwise/val.parquet")
    assert [row["extra_info"]["source"] for row in pairwise_val] == [
        "nvidia/HelpSteer2[train] data_dir=preference row 5"
    ]
