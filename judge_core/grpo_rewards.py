"""Rewards of the GRPO judge recipes: verl `custom_reward_function`s for the `naive` reward manager.

    custom_reward_function.path=judge_core/grpo_rewards.py
    custom_reward_function.name=compute_pointwise_score   (or compute_pointwise_recall_score, compute_pairwise_score)

The judge's answer is parsed by `judge_core.protocol.templates` (strict: one answer tag after the last
</think>). A malformed or missing answer is a format failure with the lowest reward, never a
prediction. A well-formed answer earns its closeness to the label, in [0, 1]:

    pointwise         1 - |predicted - label| / 4     exact 1.0, off by one 0.75, ... off by four 0.0
    pointwise recall  pointwise's where the reasoning recalls the correct answer (the ground truth's), else 0.0
    pairwise          1.0 for the right verdict, 0.0 for another (A, B, or tie: a tie is a verdict, right
                      against a tie label only)

minus MISSING_THINK_PENALTY when it does not start with one well-formed <think>..</think> block
(`Judgement.has_think`: a bare </think> ends the reasoning but earns nothing). The penalty is smaller than one
point of pointwise distance, so being right always outweighs showing the reasoning, and every
well-formed answer stays above every malformed one.

Every call of one reward returns the same numeric keys (REWARD_KEYS; the recall-checked reward adds
`recall_ok`), so verl can average each of them over a batch (validation metrics
`val-aux/<data_source>/<key>/mean@N`).
"""

from __future__ import annotations

from judge_core.protocol import templates

FORMAT_FAILURE_REWARD = -1.0
MISSING_THINK_PENALTY = 0.1
REWARD_KEYS = ("score", "accuracy", "format_ok", "think_ok")


def compute_pointwise_score(data_source, solution_str, ground_truth, extra_info=None) -> dict:
    """Reward of a `<think>..</think><score>N</score>` answer against a `{"score": label}` ground truth."""
    label = _label(ground_truth, "score")
    judgement = templates.parse_pointwise(solution_str)
    if not judgement.ok:
        return _format_failure(judgement)
    return _graded(judgement, closeness=_pointwise_closeness(judgement.value, label))


def compute_pointwise_recall_score(data_source, solution_str, ground_truth, extra_info=None) -> dict:
    """compute_pointwise_score, paid only when the reasoning recalls the correct answer that the ground truth
    carries (`{"score": label, "answer": "22"}`, `data_prep offline --pointwise-answer-first`): the right grade
    reached from a wrong recalled value (`The correct answer is 13; it answers 12, which is wrong.` where the
    answer is 22) earns 0, as the farthest grade does. `accuracy` stays the exact grade's; `recall_ok` says whether the
    recalled value was right."""
    truth = _ground_truth(ground_truth, "score")
    label, answer = truth["score"], truth.get("answer")
    if answer is None:
        raise ValueError(
            f"compute_pointwise_recall_score needs the correct answer in the ground truth, got {ground_truth!r}: "
            "make the data with data_prep offline --pointwise-answer-first"
        )
    judgement = templates.parse_pointwise(solution_str)
    recalled = templates.recalled_answer(judgement.reasoning) if judgement.has_think else None
    recall_ok = recalled is not None and templates.same_answer(recalled, answer)
    if not judgement.ok:
        reward = _format_failure(judgement)
    else:
        closeness = _pointwise_closeness(judgement.value, label)
        reward = _graded(judgement, closeness if recall_ok else 0.0, exact=closeness == 1.0)
    return {**reward, "recall_ok": float(recall_ok)}


def _pointwise_closeness(score: int, label: int) -> float:
    return 1.0 - abs(score - label) / (templates.MAX_SCORE - templates.MIN_SCORE)


def compute_pairwise_score(data_source, solution_str, ground_truth, extra_info=None) -> dict:
    """Reward of a `<think>..</think><better>A|B|tie</better>` answer against a `{"better": verdict}` ground
    truth."""
    label = _label(ground_truth, "better")
    judgement = templates.parse_pairwise(solution_str, templates.PAIRWISE_VERDICTS)
    if not judgement.ok:
        return _format_failure(judgement)
    return _graded(judgement, closeness=1.0 if judgement.value == label else 0.0)


def _label(ground_truth: str, key: str):
    """The label of a ground truth; a ground truth of the other mode is a data error, not a score."""
    return _ground_truth(ground_truth, key)[key]


def _ground_truth(ground_truth: str, key: str) -> dict:
    """The decoded ground truth, which must hold `key` (the label of this reward's mode)."""
    truth = templates.read_ground_truth(ground_truth)
    if key not in truth:
        raise ValueError(
            f"this reward needs a {{{key!r}: ...}} ground truth, got {ground_truth!r}: "
            "pointwise and pairwise data are mixed up"
        )
    return truth


def _graded(judgement: templates.Judgement, closeness: float, exact: bool | None = None) -> dict:
    """`exact`: whether the verdict is the label's, where the closeness paid is not the verdict's alone."""
    penalty = 0.0 if judgement.has_think else MISSING_THINK_PENALTY
    return {
        "score": closeness - penalty,
        "accuracy": float(closeness == 1.0 if exact is None else exact),
        "format_ok": 1.0,
        "think_ok": float(judgement.has_think),
    }


def _format_failure(judgement: templates.Judgement) -> dict:
    return {
        "score": FORMAT_FAILURE_REWARD,
        "accuracy": 0.0,
        "format_ok": 0.0,
        "think_ok": float(judgement.has_think),
    }
