"""The offline dataset: SFT, Bradley-Terry, GRPO pointwise / pairwise, a policy's RL questions and an eval
set, generated from the facts of `offline_facts` without any download, deterministic for a seed.

Each category's facts are split (seeded) into train / val / eval facts first, so no val or eval question
is ever seen in training. A training example is a (fact, phrasing, wrong answer) triple; the good answer
states the fact, the flawed one states the same sentence with the wrong answer.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import zip_longest
from math import comb
from pathlib import Path

from data_prep import offline_labels, outputs
from data_prep.offline_facts import CATEGORIES, Category, Fact, Phrasing
from data_prep.records import UsageError
from judge_core import rules
from judge_core.protocol import templates
from judge_core.settings import option

DATA_SOURCE_POINTWISE = "offline/pointwise"
DATA_SOURCE_PAIRWISE = "offline/pairwise"
DATA_SOURCE_POLICY = "offline/policy"
EVAL = "eval"
# A correct answer against a confidently wrong one is the strongest preference on HelpSteer2's scale.
MARGIN = 3.0
FLAWED_PER_EVAL_PROMPT = 3
EVAL_MODEL_NAME = "offline-template"
UNSURE_SUFFIX = " I am not completely sure, though."
NO_ANSWER = "I do not know the answer to that question."
GRADES = tuple(range(templates.MIN_SCORE, templates.MAX_SCORE + 1))
CONFIDENT_GRADES = (templates.MIN_SCORE, templates.MAX_SCORE)  # confidently wrong, plainly correct
HEDGED_GRADES = tuple(grade for grade in GRADES if grade not in CONFIDENT_GRADES)


@dataclass(frozen=True)
class OfflineConfig:
    """How much is generated, and the seed of everything drawn."""

    train_size: int = option(720, "train preference pairs (also pointwise and pairwise rows)")
    val_size: int = option(80, "val preference pairs (also pointwise and pairwise rows)")
    eval_size: int = option(100, "eval prompts (1 correct and 3 flawed answers each)")
    seed: int = option(0, "seed of the fact split and of everything drawn")
    hard_negatives: bool = option(
        False,
        "Bradley-Terry pairs also pit each question's good answer against answers a policy games a weak judge with: "
        "the question's own subject given as the answer, and the question asked back (val and train; the other "
        "files are unchanged)",
    )
    both_orders: bool = option(
        False,
        "pairwise rows (grpo/pairwise, sft_judge_pairwise) in both orders: each pair twice, the second time with its "
        "answers swapped, so that a judge trained on them cannot gain from a position (the other files are unchanged)",
    )
    pointwise_reference: bool = option(
        False,
        "pointwise judge rows (grpo/pointwise, sft_judge_pointwise) show the judge a correct reference answer "
        "(reference-guided grading): a small judge then compares instead of recalling the fact; evaluate it with "
        "--reference-column reference and serve it with --reference-from-answer (the other files are unchanged)",
    )
    reference_first: bool = option(
        False,
        "with --pointwise-reference, each pointwise demonstration (sft_judge_pointwise) states the reference's value "
        "before the response's ('The reference says 30; it answers 40, which disagrees.'), so that its verdict "
        "follows both values it compares (the other files are unchanged)",
    )
    pairwise_answer_first: bool = option(
        False,
        "each pairwise demonstration (sft_judge_pairwise) states the correct answer before either response's "
        "('The correct answer is 30; Response A says 40, which is wrong; ...'): the judge recalls the answer, which "
        "does not depend on the responses' order, then compares each response with it (the other files are unchanged)",
    )
    pointwise_answer_first: bool = option(
        False,
        "without a reference, each pointwise demonstration (sft_judge_pointwise) states the correct answer before the "
        "response's value ('The correct answer is 30; it answers 40, which is wrong.'): the judge recalls the answer "
        "before it judges, then compares; grpo/pointwise's ground truths also carry that answer "
        '({"score": N, "answer": "30"}) for the reward that checks the recall, compute_pointwise_recall_score (the '
        "other files are unchanged)",
    )
    arithmetic_working: bool = option(
        False,
        "each arithmetic demonstration that opens with the correct answer (sft_judge_pointwise with "
        "--pointwise-answer-first, sft_judge_pairwise with --pairwise-answer-first) writes the sum, difference or "
        "product out before it ('17 + 5 = 22, so the correct answer is 22; it answers 12, which is wrong.'): the "
        "judge computes from the operands it has just written instead of recalling the result (the other files are "
        "unchanged)",
    )
    pairwise_tie_share: float | None = option(
        None,
        "share of the pairwise rows (grpo/pairwise, sft_judge_pairwise) that compare two correct answers to a "
        "question, phrased differently, with the verdict tie; every pairwise prompt then offers "
        "<better>tie</better>, so that a judge need not split two equal responses by their position (the other "
        "files are unchanged); unset: no ties",
    )
    pairwise_wrong_tie_share: float | None = option(
        None,
        "with --pairwise-tie-share, share of the pairwise rows (grpo/pairwise, sft_judge_pairwise) that compare two "
        "wrong answers to a question (two of its fact's wrong values) with the verdict tie: a judge compared on a "
        "group of answers (all pairs) meets two wrong answers in half its comparisons (the other files are "
        "unchanged); unset: none",
    )
    confident_share: float | None = option(
        None,
        "share of the graded rows (grpo/pointwise, sft_judge_pointwise, attributes) that are confident answers, "
        "half correct (grade 4) and half confidently wrong (grade 0), the other grades sharing the rest equally; "
        "unset: the five grades equally often",
    )
    val_rows_per_fact: int = option(
        1,
        "rows of eval/val.parquet per val fact: the first is the row written without this flag, each further one "
        "another question phrasing with three flawed answers not drawn before for that fact (a fact with fewer such "
        "draws gives fewer rows); more rows give a steadier val score to decide settings on (the other files are "
        "unchanged)",
    )
    eval_fraction: float = 0.25  # of each category's facts; fixed, not a flag
    val_fraction: float = 0.10

    def __post_init__(self):
        if min(self.train_size, self.val_size, self.eval_size) < 1:
            raise UsageError("offline sizes must be at least 1")
        if self.val_rows_per_fact < 1:
            raise UsageError(f"--val-rows-per-fact must be at least 1, not {self.val_rows_per_fact}")
        if self.reference_first and not self.pointwise_reference:
            raise UsageError("--reference-first needs --pointwise-reference: without it no reference is shown")
        if self.pointwise_answer_first and self.pointwise_reference:
            raise UsageError(
                "--pointwise-answer-first is for judges shown no reference; with one, use --reference-first"
            )
        if self.arithmetic_working and not (self.pointwise_answer_first or self.pairwise_answer_first):
            raise UsageError(
                "--arithmetic-working needs --pointwise-answer-first or --pairwise-answer-first: "
                "it writes out that correct answer"
            )
        if self.pairwise_tie_share is not None and not 0 < self.pairwise_tie_share < 1:
            raise UsageError(f"--pairwise-tie-share must be above 0 and below 1, not {self.pairwise_tie_share}")
        if self.pairwise_wrong_tie_share is not None:
            self._check_wrong_tie_share()
        if self.confident_share is not None and not 0 <= self.confident_share <= 1:
            raise UsageError(f"--confident-share must be between 0 and 1, not {self.confident_share}")

    def _check_wrong_tie_share(self) -> None:
        share = self.pairwise_wrong_tie_share
        if self.pairwise_tie_share is None:
            raise UsageError("--pairwise-wrong-tie-share needs --pairwise-tie-share: without it no prompt offers tie")
        if not 0 < share < 1 - self.pairwise_tie_share:
            raise UsageError(
                f"--pairwise-wrong-tie-share must be above 0 and below 1 - --pairwise-tie-share "
                f"({1 - self.pairwise_tie_share:g}), not {share}"
            )

    @property
    def pointwise_value_first(self) -> str | None:
        """The value the pointwise demonstrations' reasoning opens with (offline_labels.VALUE_FIRST_OPENINGS)."""
        if self.reference_first:
            return "reference"
        return "answer" if self.pointwise_answer_first else None

    @property
    def pairwise_ties(self) -> bool:
        """Whether the pairwise prompts offer the verdict tie (some of their rows are ties)."""
        return self.pairwise_tie_share is not None


@dataclass(frozen=True)
class Example:
    category: str
    fact: Fact
    phrasing: Phrasing
    wrong: str

    @property
    def question(self) -> str:
        return self.fact.question(self.phrasing)

    @property
    def good(self) -> str:
        return self.fact.statement(self.phrasing, self.fact.answer)

    @property
    def flawed(self) -> str:
        return self.fact.statement(self.phrasing, self.wrong)

    @property
    def origin(self) -> outputs.RowOrigin:
        return origin(self.category, self.fact)

    def hard_negatives(self) -> list[str]:
        """The statement with each of the question's own subjects as its answer ("The capital of Peru is Peru."),
        then the question asked back."""
        subjects = dict.fromkeys(str(value) for value in self.fact.slots.values())
        echoes = [self.fact.statement(self.phrasing, s) for s in subjects if s.lower() != self.fact.answer.lower()]
        return [*echoes, self.question]


def origin(category: str, fact: Fact) -> outputs.RowOrigin:
    return outputs.RowOrigin(f"{category}/{fact.key}", category, "offline")


def answer_type(answer: str) -> str:
    """The rule fallback's type for a fact's answer; given, not inferred, since the rules would read the
    answer "A" (the first letter of the alphabet) as a multiple-choice letter and "false" as a boolean."""
    return rules.NUMBER if answer.isdigit() else rules.TEXT


def graded_response(example: Example, score: int, rng: random.Random) -> str:
    """An answer that deserves `score` on the 0-4 helpfulness scale:
    4 correct; 3 correct but needlessly unsure; 2 the correct and a wrong statement, undecided;
    1 no answer; 0 confidently wrong."""
    if score == 4:
        return example.good
    if score == 3:
        return example.good + UNSURE_SUFFIX
    if score == 2:
        first, second = rng.sample([example.good, example.flawed], 2)
        return f'I am not sure which is right: "{first}" or "{second}"'
    if score == 1:
        return NO_ANSWER
    if score == 0:
        return example.flawed
    raise ValueError(f"no graded answer for score {score}")


def _drawn_grades(count: int, confident_share: float | None, rng: random.Random) -> list[int]:
    """`count` grades in a random order: each grade equally often, or `confident_share` of them 0 or 4 (as
    many of each) and the rest the hedged grades 1-3 (as many of each)."""
    if confident_share is None:
        grades = [GRADES[i % len(GRADES)] for i in range(count)]
    else:
        confident = round(confident_share * count)
        grades = [CONFIDENT_GRADES[i % 2] for i in range(confident)]
        grades += [HEDGED_GRADES[i % len(HEDGED_GRADES)] for i in range(count - confident)]
    rng.shuffle(grades)
    return grades


def reference_answer(fact: Fact, asked: Phrasing) -> str:
    """A correct answer phrased unlike the eval row's chosen one: the fact's first other phrasing, or
    "The answer is X." for a fact with only one."""
    other = next((phrasing for phrasing in fact.phrasings if phrasing != asked), None)
    return fact.statement(other, fact.answer) if other else f"The answer is {fact.answer}."


def split_facts(category: Category, config: OfflineConfig) -> dict[str, list[Fact]]:
    facts = list(category.facts)
    random.Random(f"{config.seed}/{category.name}").shuffle(facts)
    n_eval = max(1, round(config.eval_fraction * len(facts)))
    n_val = max(1, round(config.val_fraction * len(facts)))
    return {EVAL: facts[:n_eval], "val": facts[n_eval : n_eval + n_val], "train": facts[n_eval + n_val :]}


def _examples(category: str, facts: list[Fact], rng: random.Random) -> Iterator[Example]:
    """Every (phrasing, wrong answer) of the facts in a seeded order that uses each fact once per round."""
    per_fact = []
    for fact in facts:
        combos = [(phrasing, wrong) for phrasing in fact.phrasings for wrong in fact.wrong]
        rng.shuffle(combos)
        per_fact.append([Example(category, fact, phrasing, wrong) for phrasing, wrong in combos])
    for round_ in zip_longest(*per_fact):
        yield from (example for example in round_ if example is not None)


def _round_robin(streams: list[Iterator], count: int, what: str) -> list:
    """`count` items taken from the categories' streams in turn; one that runs out leaves the others to fill."""
    taken, active = [], list(streams)
    while len(taken) < count and active:
        for stream in list(active):
            item = next(stream, None)
            if item is None:
                active.remove(stream)
                continue
            taken.append(item)
            if len(taken) == count:
                break
    if len(taken) < count:
        raise UsageError(f"asked for {count} {what} but the facts allow only {len(taken)}")
    return taken


def _eval_rows(category: str, facts: list[Fact], rng: random.Random) -> Iterator[tuple[dict, dict]]:
    """One RewardBench 2 row per fact (a drawn phrasing, the good answer and 3 distinct flawed ones), with
    the policy's held-out row of the same question."""
    for fact in facts:
        yield _eval_row(category, fact, *_eval_draw(fact, rng), fact.key)


def _eval_draw(fact: Fact, rng: random.Random) -> tuple[Phrasing, list[str]]:
    phrasing = rng.choice(fact.phrasings)
    return phrasing, rng.sample(fact.wrong, FLAWED_PER_EVAL_PROMPT)


def _eval_row(category: str, fact: Fact, phrasing: Phrasing, wrongs: list[str], row_key: str) -> tuple[dict, dict]:
    policy_row = outputs.policy_row(
        DATA_SOURCE_POLICY, fact.question(phrasing), fact.answer, answer_type(fact.answer), origin(category, fact)
    )
    eval_row = outputs.rb2_row(
        f"offline/{category}/{row_key}",
        fact.question(phrasing),
        [fact.statement(phrasing, fact.answer)],
        [fact.statement(phrasing, wrong) for wrong in wrongs],
        [EVAL_MODEL_NAME] * (1 + len(wrongs)),
        category,
        {"category": category, "fact": fact.key},
        reference_answer(fact, phrasing),
    )
    return eval_row, policy_row


def generate(out_dir: str | Path, config: OfflineConfig = OfflineConfig()) -> outputs.Summary:
    summary = outputs.Summary(f"offline (seed {config.seed})", Path(out_dir))
    facts = {category.name: split_facts(category, config) for category in CATEGORIES}
    for split, size in (("train", config.train_size), ("val", config.val_size)):
        rng = random.Random(f"{config.seed}/{split}")
        streams = [_examples(name, by_split[split], rng) for name, by_split in facts.items()]
        _add_split(summary, split, _round_robin(streams, size, f"{split} pairs"), rng, config)
    rng = random.Random(f"{config.seed}/{EVAL}")
    streams = [_eval_rows(name, by_split[EVAL], rng) for name, by_split in facts.items()]
    eval_rows, policy_rows = zip(*_round_robin(streams, config.eval_size, "eval prompts"), strict=True)
    summary.add_eval(list(eval_rows))
    summary.add_split(outputs.POLICY, outputs.TEST, list(policy_rows))
    summary.add_eval(_val_eval_rows(facts, config), outputs.EVAL_VAL_FILE)
    return summary.save()


def _val_eval_rows(facts: dict[str, dict[str, list[Fact]]], config: OfflineConfig) -> list[dict]:
    """One eval row per val fact, from a random stream of its own so that every other file stays the same; then,
    with val_rows_per_fact > 1, each fact's further rows, from another stream, so that the first rows stay those
    of the file written without it."""
    rng = random.Random(f"{config.seed}/eval-val")
    draws = [(name, fact, *_eval_draw(fact, rng)) for name, by_split in facts.items() for fact in by_split["val"]]
    rows = [_eval_row(name, fact, phrasing, wrongs, fact.key)[0] for name, fact, phrasing, wrongs in draws]
    further_rng = random.Random(f"{config.seed}/eval-val-further")
    for name, fact, phrasing, wrongs in draws:
        rows += _further_val_rows(name, fact, (phrasing, wrongs), config.val_rows_per_fact - 1, further_rng)
    return rows


def _further_val_rows(
    category: str, fact: Fact, first: tuple[Phrasing, list[str]], count: int, rng: random.Random
) -> list[dict]:
    """Up to `count` more rows of `fact` after its `first` draw, each a (phrasing, set of flawed answers) not drawn
    before, the phrasings asked in turn."""
    drawn = {(first[0], frozenset(first[1]))}
    left = {phrasing: comb(len(fact.wrong), FLAWED_PER_EVAL_PROMPT) for phrasing in fact.phrasings}
    left[first[0]] -= 1
    turn = fact.phrasings.index(first[0])
    rows = []
    while len(rows) < count:
        following = fact.phrasings[turn + 1 :] + fact.phrasings[: turn + 1]
        phrasing = next((candidate for candidate in following if left[candidate]), None)
        if phrasing is None:
            break
        wrongs = rng.sample(fact.wrong, FLAWED_PER_EVAL_PROMPT)
        if (phrasing, frozenset(wrongs)) in drawn:
            continue
        drawn.add((phrasing, frozenset(wrongs)))
        left[phrasing] -= 1
        turn = fact.phrasings.index(phrasing)
        rows.append(_eval_row(category, fact, phrasing, wrongs, f"{fact.key}/{len(rows) + 2}")[0])
    return rows


def _graded(
    examples: list[Example], confident_share: float | None, rng: random.Random
) -> list[tuple[Example, int, str]]:
    scores = _drawn_grades(len(examples), confident_share, rng)
    return [(e, score, graded_response(e, score, rng)) for e, score in zip(examples, scores, strict=True)]


def _add_split(
    summary: outputs.Summary, split: str, examples: list[Example], rng: random.Random, options: OfflineConfig
) -> None:
    """The split's rows of every file, from its examples; `rng` (the split's stream) grades the answers, then
    places the pairwise rows' good answers."""
    questions = list({(e.category, e.fact.key, e.phrasing): e for e in examples}.values())
    summary.add_split(outputs.SFT, split, [outputs.sft_row(e.question, e.good) for e in questions])
    summary.add_split(outputs.POLICY, split, _policy_rows(questions))
    summary.add_split(outputs.BRADLEY_TERRY, split, _bradley_terry_rows(examples, questions, options))
    graded = _graded_split(examples, split, rng, options)
    summary.add_split(outputs.POINTWISE, split, _pointwise_rows(graded, options))
    summary.add_split(outputs.SFT_JUDGE_POINTWISE, split, _pointwise_judge_rows(graded, options))
    summary.add_split(outputs.ATTRIBUTES, split, _attribute_rows(graded))
    ordered = _ordered_pairs(examples, rng, options)
    tied = _tied(examples, len(ordered), options, split)
    summary.add_split(outputs.PAIRWISE, split, _pairwise_rows(ordered, tied, options))
    summary.add_split(outputs.SFT_JUDGE_PAIRWISE, split, _pairwise_judge_rows(ordered, tied, options))


def _policy_rows(questions: list[Example]) -> list[dict]:
    return [
        outputs.policy_row(DATA_SOURCE_POLICY, e.question, e.fact.answer, answer_type(e.fact.answer), e.origin)
        for e in questions
    ]


def _bradley_terry_rows(examples: list[Example], questions: list[Example], options: OfflineConfig) -> list[dict]:
    """Each example's good answer over its flawed one; with --hard-negatives, also each question's good answer over
    its hard negatives."""
    rows = [outputs.bradley_terry_row(e.question, e.good, e.flawed, MARGIN) for e in examples]
    if options.hard_negatives:
        rows += [
            outputs.bradley_terry_row(e.question, e.good, negative, MARGIN)
            for e in questions
            for negative in e.hard_negatives()
        ]
    return rows


def _graded_split(
    examples: list[Example], split: str, rng: random.Random, options: OfflineConfig
) -> list[tuple[Example, int, str]]:
    """(example, grade, graded response) of each example; the default draw always consumes `rng`."""
    graded = _graded(examples, None, rng)
    if options.confident_share is not None:
        # Drawn from a stream of its own after the default draw, so that the files drawn later stay the same.
        graded = _graded(examples, options.confident_share, random.Random(f"{options.seed}/{split}/confident"))
    return graded


def _reference(e: Example, options: OfflineConfig) -> str | None:
    return reference_answer(e.fact, e.phrasing) if options.pointwise_reference else None


def _working(e: Example, options: OfflineConfig) -> str | None:
    return e.fact.working if options.arithmetic_working else None


def _recalled(e: Example, options: OfflineConfig) -> str | None:
    """The answer a demonstration recalls first, for the recall reward."""
    return e.fact.answer if options.pointwise_value_first == "answer" else None


def _pointwise_rows(graded: list[tuple[Example, int, str]], options: OfflineConfig) -> list[dict]:
    return [
        outputs.pointwise_row(
            DATA_SOURCE_POINTWISE, e.question, response, score, e.origin, _reference(e, options), _recalled(e, options)
        )
        for e, score, response in graded
    ]


def _pointwise_judge_rows(graded: list[tuple[Example, int, str]], options: OfflineConfig) -> list[dict]:
    return [
        outputs.judge_sft_row(
            templates.pointwise_messages(e.question, response, _reference(e, options)),
            offline_labels.pointwise_answer(
                score, e.fact.answer, e.wrong, options.pointwise_value_first, _working(e, options)
            ),
        )
        for e, score, response in graded
    ]


def _attribute_rows(graded: list[tuple[Example, int, str]]) -> list[dict]:
    return [
        outputs.attributes_row(e.question, response, offline_labels.attributes(score, e.category, response))
        for e, score, response in graded
    ]


def _ordered_pairs(examples: list[Example], rng: random.Random, options: OfflineConfig) -> list[tuple[Example, bool]]:
    """(example, whether its good answer is A) of each pairwise row, A and B balanced; with --both-orders each
    example twice, the second time swapped."""
    positions = outputs.balanced_positions(len(examples), rng)
    return [
        (e, good_is_a)
        for e, drawn in zip(examples, positions, strict=True)
        for good_is_a in ((drawn, not drawn) if options.both_orders else (drawn,))
    ]


def _pairwise_rows(ordered: list[tuple[Example, bool]], tied: list[TiedPair], options: OfflineConfig) -> list[dict]:
    ties = options.pairwise_ties
    return [
        outputs.pairwise_row(DATA_SOURCE_PAIRWISE, e.question, e.good, e.flawed, chosen_is_a, e.origin, ties)
        for e, chosen_is_a in ordered
    ] + [
        outputs.pairwise_verdict_row(
            DATA_SOURCE_PAIRWISE, t.example.question, t.a, t.b, templates.PAIRWISE_TIE, t.example.origin, ties
        )
        for t in tied
    ]


def _pairwise_judge_rows(
    ordered: list[tuple[Example, bool]], tied: list[TiedPair], options: OfflineConfig
) -> list[dict]:
    ties, answer_first = options.pairwise_ties, options.pairwise_answer_first
    return [
        outputs.judge_sft_row(
            templates.pairwise_messages(e.question, *((e.good, e.flawed) if good_is_a else (e.flawed, e.good)), ties),
            offline_labels.pairwise_answer(good_is_a, e.fact.answer, e.wrong, answer_first, _working(e, options)),
        )
        for e, good_is_a in ordered
    ] + [
        outputs.judge_sft_row(
            templates.pairwise_messages(t.example.question, t.a, t.b, ties),
            offline_labels.pairwise_tie_answer(
                t.example.fact.answer, t.wrongs, answer_first, _working(t.example, options)
            ),
        )
        for t in tied
    ]


@dataclass(frozen=True)
class TiedPair:
    """A pairwise row whose verdict is tie: two correct statements of the example's fact, or (`wrongs`, the values
    A and B say) two wrong ones."""

    example: Example
    a: str
    b: str
    wrongs: tuple[str, str] | None = None

    def swapped(self) -> TiedPair:
        return TiedPair(self.example, self.b, self.a, self.wrongs and (self.wrongs[1], self.wrongs[0]))


def _tied(examples: list[Example], untied_rows: int, options: OfflineConfig, split: str) -> list[TiedPair]:
    """The tie rows that make --pairwise-tie-share of the pairwise rows (two correct answers), then those that make
    --pairwise-wrong-tie-share (two wrong answers); each kind drawn from a stream of its own."""
    correct_share, wrong_share = options.pairwise_tie_share, options.pairwise_wrong_tie_share
    if correct_share is None:
        return []
    rest = 1 - correct_share - (wrong_share or 0)
    rng = random.Random(f"{options.seed}/{split}/ties")
    tied = _correct_ties(examples, round(correct_share * untied_rows / rest), correct_share, rng)
    if wrong_share is not None:
        rng = random.Random(f"{options.seed}/{split}/wrong-ties")
        tied += _wrong_ties(examples, round(wrong_share * untied_rows / rest), wrong_share, rng)
    return tied


def _drawn(examples: list[Example], count: int, flag: str, share: float, rng: random.Random) -> list[Example]:
    if count > len(examples):
        raise UsageError(
            f"{flag} {share} needs {count} tie rows, more than the {len(examples)} pairs to draw them from"
        )
    return rng.sample(examples, count)


def _placed(pairs: list[TiedPair], rng: random.Random) -> list[TiedPair]:
    """The pairs, each in a drawn order, A and B balanced."""
    positions = outputs.balanced_positions(len(pairs), rng)
    return [pair if is_a else pair.swapped() for pair, is_a in zip(pairs, positions, strict=True)]


def _correct_ties(examples: list[Example], count: int, share: float, rng: random.Random) -> list[TiedPair]:
    """Drawn examples' good answers, each against a correct answer in another phrasing (the eval's reference)."""
    drawn = _drawn(examples, count, "--pairwise-tie-share", share, rng)
    return _placed([TiedPair(e, e.good, reference_answer(e.fact, e.phrasing)) for e in drawn], rng)


def _wrong_ties(examples: list[Example], count: int, share: float, rng: random.Random) -> list[TiedPair]:
    """Drawn examples' flawed answers, each against its fact's statement of another wrong value."""
    drawn = _drawn(examples, count, "--pairwise-wrong-tie-share", share, rng)
    pairs = []
    for e in drawn:
        other = rng.choice([value for value in e.fact.wrong if value != e.wrong])
        pairs.append(TiedPair(e, e.flawed, e.fact.statement(e.phrasing, other), (e.wrong, other)))
    return _placed(pairs, rng)
