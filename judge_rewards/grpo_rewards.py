"""Rewards of the GRPO judge recipes: verl `custom_reward_function`s for the `naive` reward manager.

    custom_reward_function.path=judge_rewards/grpo_rewards.py
    custom_reward_function.name=compute_pointwise_score   (or compute_pairwise_score)

The judge's answer is parsed by `judge_rewards.protocol.templates` (strict: one answer tag after the last
</think>). A malformed or missing answer is a format failure with the lowest reward, never a
prediction. A well-formed answer earns its closeness to the label, in [0, 1]:

    pointwise   1 - |predicted - label| / 4     exact 1.0, off by one 0.75, ... off by four 0.0
    pairwise    1.0 for the right verdict, 0.0 for another (A, B, or tie: a tie is a verdict, right against
                a tie label only)

minus MISSING_THINK_PENALTY when it does not start with one well-formed <think>..</think> block
(`Judgement.has_think`: a bare </think> ends the reasoning but earns nothing). The penalty is smaller than one
point of pointwise distance, so being right always outweighs showing the reasoning, and every
well-formed answer stays above every malformed one.

Every call returns the same numeric keys (REWARD_KEYS), so verl can average each of them over a batch
(validation metrics `val-aux/<data_source>/<key>/mean@N`).
"""

from __future__ import annotations

from judge_rewards.protocol import templates

FORMAT_FAILURE_REWARD = -1.0
MISSING_THINK_PENALTY = 0.1
REWARD_KEYS = ("score", "accuracy", "format_ok", "think_ok")


def compute_pointwise_score(data_source, solution_str, ground_truth, extra_info=None) -> dict:
    """Reward of a `<think>..</think><score>N</score>` answer against a `{"score": label}` ground truth."""
    label = _label(ground_truth, "score")
    judgement = templates.parse_pointwise(solution_str)
    if not judgement.ok:
        return _format_failure(judgement)
    distance = abs(judgement.value - label)
    return _graded(judgement, closeness=1.0 - distance / (templates.MAX_SCORE - templates.MIN_SCORE))


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
    label = templates.read_ground_truth(ground_truth)
    if key not in label:
        raise ValueError(
            f"this reward needs a {{{key!r}: ...}} ground truth, got {ground_truth!r}: "
            "pointwise and pairwise data are mixed up"
        )
    return label[key]


def _graded(judgement: templates.Judgement, closeness: float) -> dict:
    penalty = 0.0 if judgement.has_think else MISSING_THINK_PENALTY
    return {
        "score": closeness - penalty,
        "accuracy": float(closeness == 1.0),
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
