"""Does a judge rank a policy's own answers right? `python -m evaluation.judge_on_policy POLICY QUESTIONS JUDGE
[JUDGE ...]`.

A judge that scores its own preference pairs well can still teach a policy little: GRPO learns from the order of
the rewards within a group of the policy's answers, which look nothing like those pairs. This samples
`--group-size` answers per question from the policy as a rollout would (its chat template, `--temperature`, at most
`--max-new-tokens`), scores each against the question's reference with judge_core.rules and with each judge
(loaded in this process by serving's loader, as `python -m evaluation --model` does), and prints per judge:

    pairs          pairs of a rule-right and a rule-wrong answer to the same question
    pair accuracy  share of them in which the judge rewards the right answer more (a tie counts half; 0.5 is a
                   coin): judge_rewards.reward_health's `health_rule_pair_accuracy`, before any training
    right, wrong   the judge's mean reward of the rule-right and of the rule-wrong answers
    tied           questions whose answers all got the same reward: GRPO learns nothing from them

`--rule-weights 0.25 0.5` also prints each judge mixed with the rules as a reward spec would mix them
(judge_rewards/reward_spec.py): `JUDGE + w rule`, (1 - w) x judge + w x rule, and `JUDGE gated by rule`, the
judge's reward where the rule passes, else the rule's. `--subset arithmetic` keeps the questions of that
`extra_info.subset` (the questions a spec would route to the mix).

QUESTIONS is a policy parquet file as verl reads it (`data_prep offline`'s policy/val.parquet): `prompt` (the
messages the policy answers), `reward_model.ground_truth`, and `extra_info.question` (what the judge is shown, as
the reward adapter does) with an optional `extra_info.answer_type`. Choose a judge with the validation split, never
the held-out one. The same --seed, on the same machine and thread count, samples the same answers.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path

from judge_core import rules
from judge_core.settings import REQUIRED, option, parse_configs
from judge_rewards.reward_health import rule_pair_accuracy

from .reward_plots import shown
from .sampling import sample_completions


@dataclasses.dataclass
class JudgeOnPolicyConfig:
    policy: str = option(REQUIRED, "the policy's model directory (Hugging Face format)", positional=True)
    questions: str = option(
        REQUIRED,
        "policy parquet: prompt, reward_model.ground_truth, extra_info.question (extra_info.answer_type optional)",
        positional=True,
    )
    judges: list[str] = option(
        REQUIRED, "judge model directories (judge.json beside the weights), each scored in turn", positional=True
    )
    group_size: int = option(8, "answers sampled per question (the rollout's n)")
    temperature: float = option(0.7, "sampling temperature of the answers")
    max_new_tokens: int = option(48, "longest answer, in tokens (the rollout's response length)")
    seed: int = option(0, "seed of the sampling")
    subset: str = option("", "only the questions whose extra_info.subset is this (empty: all)")
    rule_weights: list[float] | None = option(None, "also report each judge mixed with the rules at these weights")
    out: str = option("", "also write every answer with its rule score and each judge's reward here (JSONL)")


@dataclasses.dataclass
class Question:
    messages: list[dict]
    shown: str | list  # extra_info.question: what the judge sees
    reference: str
    answer_type: str | None


@dataclasses.dataclass
class Answer:
    question: Question
    text: str
    rule_score: float
    rewards: dict[str, float] = dataclasses.field(default_factory=dict)


def read_questions(path: Path, subset: str = "") -> list[Question]:
    """The questions of a policy parquet (of one extra_info.subset when given); a row without what is needed is
    an error naming the file and row."""
    import pyarrow.parquet as pq

    questions = []
    for number, row in enumerate(pq.read_table(path).to_pylist()):
        extra = row.get("extra_info") or {}
        reference = (row.get("reward_model") or {}).get("ground_truth")
        missing = [
            name
            for name, value in (
                ("prompt", row.get("prompt")),
                ("reward_model.ground_truth", reference),
                ("extra_info.question", extra.get("question")),
            )
            if value is None or len(value) == 0
        ]
        if missing:
            raise ValueError(f"{path}: row {number} has no {', '.join(missing)}")
        try:
            rules.resolve_answer_type(str(reference), extra.get("answer_type"))
        except ValueError as err:
            raise ValueError(f"{path}: row {number}: {err}") from None
        if subset and extra.get("subset") != subset:
            continue
        questions.append(Question(row["prompt"], extra["question"], str(reference), extra.get("answer_type")))
    return questions


def sample_answers(config: JudgeOnPolicyConfig, questions: list[Question]) -> list[Answer]:
    """`group_size` sampled answers per question, with their rule scores, in question order."""
    texts = sample_completions(
        config.policy,
        [q.messages for q in questions],
        config.group_size,
        config.temperature,
        config.max_new_tokens,
        config.seed,
    )
    return [
        Answer(question, text, rules.score_answer(text, question.reference, question.answer_type).score)
        for question, group in zip(questions, texts, strict=True)
        for text in group
    ]


def judge_answers(answers: list[Answer], judge_dir: str) -> None:
    """Each answer's reward from the judge in `judge_dir`, stored under that name; a failed judgement is an error."""
    from judge_models.config import JudgeConfig
    from serving.judges import JudgeItem

    from .judges import InProcessJudge

    judge = InProcessJudge(JudgeConfig(model=judge_dir))
    items = [JudgeItem.create(a.question.shown, a.text, a.question.reference) for a in answers]
    for answer, verdict in zip(answers, judge.score_batch(items), strict=True):
        if verdict.error:
            raise RuntimeError(f"{judge_dir}: the judge failed on an answer: {verdict.error}")
        answer.rewards[judge_dir] = verdict.score


def add_rule_mixes(answers: list[Answer], judges: list[str], weights: list[float]) -> list[str]:
    """Each judge's reward mixed with the rule score, stored per answer; the names of the mixes, judge by judge
    (none without weights)."""
    names = []
    if not weights:
        return names
    for judge in judges:
        mixes = {f"{judge} + {w:g} rule": lambda j, r, w=w: (1 - w) * j + w * r for w in weights}
        mixes[f"{judge} gated by rule"] = lambda j, r: j if r >= 0.5 else r
        for name, mix in mixes.items():
            for answer in answers:
                answer.rewards[name] = mix(answer.rewards[judge], answer.rule_score)
        names.extend(mixes)
    return names


def report(answers: list[Answer], config: JudgeOnPolicyConfig, judges: list[str] | None = None) -> list[str]:
    judges = judges or config.judges
    groups: dict[int, list[Answer]] = {}
    for answer in answers:
        groups.setdefault(id(answer.question), []).append(answer)
    mixed = sum(len({a.rule_score >= 0.5 for a in group}) == 2 for group in groups.values())
    width = max(len("judge"), *map(len, judges))
    lines = [
        f"{len(answers)} answers to {len(groups)} questions ({config.group_size} each, temperature "
        f"{config.temperature}, at most {config.max_new_tokens} tokens, seed {config.seed}): rule accuracy "
        f"{statistics.fmean(a.rule_score for a in answers):.3f}, {mixed} questions with a right and a wrong answer",
        f"{'judge':<{width}}  {'pairs':>5}  {'pair accuracy':>13}  {'right':>6}  {'wrong':>6}  {'tied':>4}",
    ]
    for judge in judges:
        pairs, accuracy = rule_pair_accuracy(
            [[(a.rewards[judge], a.rule_score) for a in group] for group in groups.values()]
        )
        right = [a.rewards[judge] for a in answers if a.rule_score >= 0.5]
        wrong = [a.rewards[judge] for a in answers if a.rule_score < 0.5]
        tied = sum(max(a.rewards[judge] for a in g) - min(a.rewards[judge] for a in g) < 1e-9 for g in groups.values())
        lines.append(
            f"{judge:<{width}}  {pairs:>5.0f}  {shown(accuracy):>13}  {shown(_mean(right)):>6}  "
            f"{shown(_mean(wrong)):>6}  {tied:>4}"
        )
    return lines


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def write_answers(answers: list[Answer], path: Path) -> None:
    with path.open("w") as file:
        for a in answers:
            record = {"question": a.question.shown, "reference": a.question.reference, "answer": a.text}
            file.write(json.dumps({**record, "rule_score": a.rule_score, "rewards": a.rewards}, ensure_ascii=False))
            file.write("\n")


def main(argv: list[str] | None = None) -> None:
    (config,) = parse_configs("python -m evaluation.judge_on_policy", __doc__, [JudgeOnPolicyConfig], argv)
    try:
        questions = read_questions(Path(config.questions), config.subset)
    except (OSError, ValueError) as err:
        raise SystemExit(f"judge_on_policy: {err}") from None
    answers = sample_answers(config, questions)
    for judge in config.judges:
        judge_answers(answers, judge)
    mixes = add_rule_mixes(answers, config.judges, config.rule_weights or [])
    print("\n".join(report(answers, config, [*config.judges, *mixes])))
    if config.out:
        write_answers(answers, Path(config.out))
        print(config.out)


if __name__ == "__main__":
    main()
