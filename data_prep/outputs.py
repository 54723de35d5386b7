"""The output layout the training recipes read, its parquet schemas, the row builders, and the summary.

Layout under an output directory (names are a contract with cookbooks/ and the evaluation):
  sft/{train,val}.parquet             messages
  bradley_terry/{train,val}.parquet   chosen, rejected (JSON message lists), margin
  grpo/pointwise/{train,val}.parquet  verl RL rows whose prompt asks for a 0-4 score
  grpo/pairwise/{train,val}.parquet   verl RL rows whose prompt asks for A or B
  policy/{train,val}.parquet          verl RL rows of a policy (the plain question), rewarded by a judge
  policy/test.parquet                 (offline only) the policy's held-out questions: the eval prompts' questions
  sft_judge_pointwise/{train,val}.parquet  messages: a pointwise judge prompt + a short judge-format answer
  sft_judge_pairwise/{train,val}.parquet   messages: a pairwise judge prompt + a short judge-format answer
  attributes/{train,val}.parquet      conversation (JSON message list) + one 0-4 float per attribute
  eval/test.parquet                   held-out rows in RewardBench 2's own schema (offline: + reference)
  eval/val.parquet                    (offline only) the same for the val facts, to choose a judge's settings on
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from judge_core.protocol import judge_spec, templates

SFT = "sft"
BRADLEY_TERRY = "bradley_terry"
POINTWISE = "grpo/pointwise"
PAIRWISE = "grpo/pairwise"
POLICY = "policy"
SFT_JUDGE_POINTWISE = "sft_judge_pointwise"
SFT_JUDGE_PAIRWISE = "sft_judge_pairwise"
ATTRIBUTES = "attributes"
# HelpSteer2's five attributes, each rated 0-4; the columns of `attributes/` after `conversation`.
ATTRIBUTE_NAMES = judge_spec.HELPSTEER2_ATTRIBUTES
EVAL_FILE = "eval/test.parquet"
EVAL_VAL_FILE = "eval/val.parquet"
SPLITS = ("train", "val")
TEST = "test"

ABILITY = "judge"
REWARD_STYLE = "rule"  # the reward compares the judge's parsed answer with the ground truth
POLICY_ABILITY = "qa"
POLICY_REWARD_STYLE = "model"  # a judge model scores the policy's answer (judge_rewards.verl_reward)

_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
SFT_SCHEMA = pa.schema([("messages", _MESSAGES)])
BRADLEY_TERRY_SCHEMA = pa.schema([("chosen", pa.string()), ("rejected", pa.string()), ("margin", pa.float64())])
ATTRIBUTES_SCHEMA = pa.schema([("conversation", pa.string()), *((name, pa.float64()) for name in ATTRIBUTE_NAMES)])
# The datasets that are not verl RL rows.
PLAIN_SCHEMAS = {
    SFT: SFT_SCHEMA,
    SFT_JUDGE_POINTWISE: SFT_SCHEMA,
    SFT_JUDGE_PAIRWISE: SFT_SCHEMA,
    BRADLEY_TERRY: BRADLEY_TERRY_SCHEMA,
    ATTRIBUTES: ATTRIBUTES_SCHEMA,
}
EXTRA_INFO = pa.struct(
    [
        ("split", pa.string()),
        ("index", pa.int64()),
        ("prompt_id", pa.string()),
        ("subset", pa.string()),
        ("source", pa.string()),
    ]
)
# What judge_rewards.verl_reward reads: the prompt (verl does not pass it to a reward function) and the
# reference answer's type (for the rule fallback; the answer itself is the ground truth).
POLICY_EXTRA_INFO = pa.struct([*EXTRA_INFO, ("question", pa.string()), ("answer_type", pa.string())])


def _rl_schema(extra_info: pa.StructType) -> pa.Schema:
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", _MESSAGES),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", extra_info),
        ]
    )


GRPO_SCHEMA = _rl_schema(EXTRA_INFO)
POLICY_SCHEMA = _rl_schema(POLICY_EXTRA_INFO)
RL_SCHEMAS = {POINTWISE: GRPO_SCHEMA, PAIRWISE: GRPO_SCHEMA, POLICY: POLICY_SCHEMA}
# RewardBench 2's columns; `additional_metadata` is a struct whose fields depend on the source.
RB2_COLUMNS = {
    "id": pa.string(),
    "prompt": pa.string(),
    "chosen": pa.list_(pa.string()),
    "rejected": pa.list_(pa.string()),
    "num_correct": pa.int64(),
    "num_incorrect": pa.int64(),
    "total_completions": pa.int64(),
    "models": pa.list_(pa.string()),
    "subset": pa.string(),
}


def split_file(dataset: str, split: str) -> str:
    return f"{dataset}/{split}.parquet"


@dataclass(frozen=True)
class RowOrigin:
    """Where a GRPO row comes from; lands in `extra_info` next to `split` and `index`."""

    prompt_id: str
    subset: str
    source: str


def sft_row(prompt: templates.Conversation, response: str) -> dict:
    return {"messages": templates.conversation_messages(prompt, response)}


def judge_sft_row(judge_prompt: list[dict], answer: str) -> dict:
    """A judge warm-start row: the judge prompt (templates.*_messages) followed by the judge's answer."""
    return {"messages": [*judge_prompt, {"role": "assistant", "content": answer}]}


def attributes_row(prompt: templates.Conversation, response: str, scores: dict[str, float]) -> dict:
    """The conversation a scalar judge reads (as in bradley_terry's `chosen`) and its five attribute ratings."""
    if set(scores) != set(ATTRIBUTE_NAMES):
        raise ValueError(f"attribute ratings {sorted(scores)} are not {sorted(ATTRIBUTE_NAMES)}")
    return {
        "conversation": json.dumps(templates.conversation_messages(prompt, response), ensure_ascii=False),
        **{name: float(scores[name]) for name in ATTRIBUTE_NAMES},
    }


def bradley_terry_row(prompt: templates.Conversation, chosen: str, rejected: str, margin: float) -> dict:
    return {
        "chosen": json.dumps(templates.conversation_messages(prompt, chosen), ensure_ascii=False),
        "rejected": json.dumps(templates.conversation_messages(prompt, rejected), ensure_ascii=False),
        "margin": float(margin),
    }


def pointwise_row(
    data_source: str,
    prompt: templates.Conversation,
    response: str,
    score: int,
    origin: RowOrigin,
    reference: str | None = None,
    answer: str | None = None,
) -> dict:
    """A pointwise GRPO row labelled `score`; `answer`: the question's correct answer, kept in the ground truth
    for the reward that checks the judge's recall of it."""
    return _grpo_row(
        data_source,
        templates.pointwise_messages(prompt, response, reference),
        templates.pointwise_ground_truth(score, answer),
        origin,
    )


def pairwise_row(
    data_source: str,
    prompt: templates.Conversation,
    chosen: str,
    rejected: str,
    chosen_is_a: bool,
    origin: RowOrigin,
    ties: bool = False,
) -> dict:
    """A pairwise GRPO row; with `ties` its prompt offers the verdict tie."""
    a, b = (chosen, rejected) if chosen_is_a else (rejected, chosen)
    return pairwise_verdict_row(data_source, prompt, a, b, "A" if chosen_is_a else "B", origin, ties)


def pairwise_verdict_row(
    data_source: str,
    prompt: templates.Conversation,
    response_a: str,
    response_b: str,
    better: str,
    origin: RowOrigin,
    ties: bool = False,
) -> dict:
    """A pairwise GRPO row whose label is `better`: A, B or (with `ties`) tie."""
    return _grpo_row(
        data_source,
        templates.pairwise_messages(prompt, response_a, response_b, ties),
        templates.pairwise_ground_truth(better),
        origin,
    )


def _grpo_row(data_source: str, messages: list[dict], ground_truth: str, origin: RowOrigin) -> dict:
    return {
        "data_source": data_source,
        "prompt": messages,
        "ability": ABILITY,
        "reward_model": {"style": REWARD_STYLE, "ground_truth": ground_truth},
        "extra_info": {"prompt_id": origin.prompt_id, "subset": origin.subset, "source": origin.source},
    }


def policy_row(data_source: str, question: str, answer: str, answer_type: str, origin: RowOrigin) -> dict:
    """A policy's RL row: the question as one user message; the judge gets it from extra_info.question."""
    return {
        "data_source": data_source,
        "prompt": templates.as_messages(question),
        "ability": POLICY_ABILITY,
        "reward_model": {"style": POLICY_REWARD_STYLE, "ground_truth": answer},
        "extra_info": {
            "prompt_id": origin.prompt_id,
            "subset": origin.subset,
            "source": origin.source,
            "question": question,
            "answer_type": answer_type,
        },
    }


def balanced_positions(count: int, rng: random.Random) -> list[bool]:
    """`count` flags "the chosen answer is A", exactly half of them true (one more false if odd), shuffled."""
    flags = [True] * (count // 2) + [False] * (count - count // 2)
    rng.shuffle(flags)
    return flags


def rb2_row(
    row_id: str,
    prompt: str,
    chosen: Sequence[str],
    rejected: Sequence[str],
    models: Sequence[str],
    subset: str,
    additional_metadata: dict | None,
    reference: str | None = None,
) -> dict:
    """A RewardBench 2 row; `reference` (a correct answer phrased unlike the chosen one, for judges that
    compare with a reference) becomes an extra column when the rows of a file have one."""
    row = {
        "id": row_id,
        "prompt": prompt,
        "chosen": list(chosen),
        "rejected": list(rejected),
        "num_correct": len(chosen),
        "num_incorrect": len(rejected),
        "total_completions": len(chosen) + len(rejected),
        "models": list(models),
        "subset": subset,
        "additional_metadata": additional_metadata,
    }
    if reference is not None:
        row["reference"] = reference
    return row


def _rb2_table(rows: list[dict]) -> pa.Table:
    columns = {name: pa.array([row[name] for row in rows], type=kind) for name, kind in RB2_COLUMNS.items()}
    columns["additional_metadata"] = pa.array([row["additional_metadata"] for row in rows])
    if any("reference" in row for row in rows):
        columns["reference"] = pa.array([row["reference"] for row in rows], type=pa.string())
    return pa.table(columns)


@dataclass
class Summary:
    """What a conversion writes and skips. Tables are built as rows come (a schema error shows at once) and
    written together by `save`, so a bad input row never leaves half an output directory behind."""

    title: str
    out_dir: Path
    tables: dict[str, pa.Table] = field(default_factory=dict)
    skipped: Counter = field(default_factory=Counter)

    def skip(self, output: str, reason: str, count: int = 1) -> None:
        if count:
            self.skipped[(output, reason)] += count

    def add_split(self, dataset: str, split: str, rows: list[dict]) -> None:
        """One split of any dataset but eval/; RL rows get `split` and `index` here."""
        if dataset in RL_SCHEMAS:
            rows = [
                {**row, "extra_info": {"split": split, "index": index, **row["extra_info"]}}
                for index, row in enumerate(rows)
            ]
            schema = RL_SCHEMAS[dataset]
        else:
            schema = PLAIN_SCHEMAS[dataset]
        self.tables[split_file(dataset, split)] = pa.Table.from_pylist(rows, schema=schema)

    def add_eval(self, rows: list[dict], path: str = EVAL_FILE) -> None:
        self.tables[path] = _rb2_table(rows)

    def save(self) -> Summary:
        for relative_path, table in self.tables.items():
            path = self.out_dir / relative_path
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
        return self

    @property
    def written(self) -> dict[str, int]:
        return {path: table.num_rows for path, table in self.tables.items()}

    def render(self) -> str:
        written = self.written
        width = max(map(len, written), default=0)
        lines = [f"{self.title}: wrote {sum(written.values())} rows under {self.out_dir}"]
        lines += [f"  {path:<{width}}  {rows:>7} rows" for path, rows in sorted(written.items())]
        if self.skipped:
            lines.append("skipped:")
            lines += [f"  {output}: {reason}: {count}" for (output, reason), count in sorted(self.skipped.items())]
        else:
            lines.append("skipped: nothing")
        return "\n".join(lines)
