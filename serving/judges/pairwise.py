"""Pairwise generative judge: a causal LM answers the pairwise template of judge_rewards.protocol.templates with
`<think>..</think><better>A|B</better>`.

Every comparison is judged in both orders (the first response as A, then as B) in the same batched generation,
so that a preference for a position cancels out. The score is the probability that the first response is better,
averaged over the two orders: with --score-mode expected the judge's probability of its letter (renormalized over
A and B), with --score-mode sample 1 or 0 by the letter generated. /judge compares the completion with the
reference `answer`; /compare compares response_a with response_b.
"""

from __future__ import annotations

from collections.abc import Sequence

from judge_rewards.protocol import templates

from ..config import JudgeConfig
from .base import ComparisonItem, JudgeItem, Verdict
from .generative import Answer, GeneratingJudge

NO_REFERENCE = "a pairwise judge compares the completion with the reference `answer`; this request has none"
# The letter of the first response of a comparison in each order: A in the first order, B in the second.
FIRST_RESPONSE_LETTERS = ("A", "B")

Comparison = tuple[templates.Conversation, str, str]  # (prompt, first response, second response)


class PairwiseJudge(GeneratingJudge):
    def __init__(self, config: JudgeConfig):
        super().__init__(config, "pairwise", templates.PAIRWISE_TAG, templates.PAIRWISE_CHOICES, reads_answer=True)

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """The probability that each completion is better than its request's reference `answer`."""
        return self._with_answers_only(items, self._compare_with_reference, NO_REFERENCE)

    def _compare_with_reference(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        comparisons = [(item.prompt, item.completion, item.answer) for item in items]
        return self._compare(comparisons, ("completion", "reference"))

    def compare_batch(self, items: Sequence[ComparisonItem]) -> list[Verdict]:
        """The probability that each response_a is better than its response_b."""
        comparisons = [(item.prompt, item.response_a, item.response_b) for item in items]
        return self._compare(comparisons, ("response_a", "response_b"))

    def _compare(self, comparisons: Sequence[Comparison], names: tuple[str, str]) -> list[Verdict]:
        """One verdict per comparison, named `names` (first response, second response) in the metadata."""
        conversations = []
        for prompt, first, second in comparisons:
            conversations += [templates.pairwise_messages(prompt, first, second)]
            conversations += [templates.pairwise_messages(prompt, second, first)]
        results = self._generate(conversations)
        return [self._verdict(results[2 * i : 2 * i + 2], names) for i in range(len(comparisons))]

    def _verdict(self, orders: list, names: tuple[str, str]) -> Verdict:
        answers: list[Answer] = []
        for letter, result in zip(FIRST_RESPONSE_LETTERS, orders, strict=True):
            answer = result if isinstance(result, Verdict) else self._read(result, templates.parse_pairwise)
            if isinstance(answer, Verdict):
                order = f"the {names[0]} as response {letter}"
                return Verdict.failed(f"judging {order}: {answer.error}", order=order, **answer.metadata)
            answers.append(answer)
        shown = list(zip(answers, FIRST_RESPONSE_LETTERS, strict=True))  # each order's answer, first response's letter
        order_scores = [_first_response_probability(answer, letter) for answer, letter in shown]
        verdicts = [names[0] if answer.value == letter else names[1] for answer, letter in shown]
        explanation = "\n\n".join(f"[{names[0]} as {letter}] {answer.reasoning}" for answer, letter in shown)
        metadata = {
            "order_scores": order_scores,
            "verdicts": verdicts,
            "orders_agree": verdicts[0] == verdicts[1],
            "score_mode": self._config.score_mode,
            "generated_tokens": [a.generated_tokens for a in answers],
        }
        return Verdict(sum(order_scores) / len(order_scores), explanation, metadata)


def _first_response_probability(answer: Answer, letter: str) -> float:
    """How likely the judge found the response shown as `letter` the better one: its probability of the letter
    (expected mode), else 1 or 0 by the letter it generated."""
    if answer.probabilities is None:
        return float(answer.value == letter)
    return answer.probabilities[letter]
