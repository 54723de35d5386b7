"""Pairwise generative judge: a causal LM answers the pairwise template of judge_core.protocol.templates with
`<think>..</think><better>A|B</better>`.

Every comparison is judged in both orders (the first response as A, then as B) in the same batched generation,
so that a preference for a position cancels out. The score is the probability that the first response is better,
averaged over the two orders: with --score-mode expected the judge's probability of its letter (renormalized over
A and B), with --score-mode sample 1 or 0 by the letter generated. A judge trained with the verdict tie
(judge.json: pairwise_ties) is offered it, and a tie is worth half: its probability counts half (renormalized over
A, B and tie), a sampled tie scores 0.5. /judge compares the completion with the reference `answer`; /compare
compares response_a with response_b.
"""

from __future__ import annotations

from collections.abc import Sequence

from judge_core.protocol import templates
from judge_models.config import JudgeConfig

from .base import ORDERS_AGREE, ComparisonItem, JudgeItem, Verdict
from .generative import Answer, GeneratingJudge

NO_REFERENCE = "a pairwise judge compares the completion with the reference `answer`; this request has none"
# The letter of the first response of a comparison in each order: A in the first order, B in the second.
FIRST_RESPONSE_LETTERS = ("A", "B")

Comparison = tuple[templates.Conversation, str, str, str | None]  # (prompt, first response, second response, rubric)


class PairwiseJudge(GeneratingJudge):
    def __init__(self, config: JudgeConfig, ties: bool = False):
        self._ties = ties
        self._verdicts = templates.pairwise_verdicts(ties)
        super().__init__(config, "pairwise", templates.PAIRWISE_TAG, self._verdicts, reads_answer=True)

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """The probability that each completion is better than its request's reference `answer`."""
        return self._with_answers_only(items, self._compare_with_reference, NO_REFERENCE)

    def _compare_with_reference(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return self.read_generations(items, self._generate(self.conversations(items)))

    def conversations(self, items: Sequence[JudgeItem]) -> list[list[dict]]:
        """Two judge prompts per item, its completion first as A and then as B against its reference `answer`."""
        return self._in_both_orders([(item.prompt, item.completion, item.answer, item.rubric) for item in items])

    def pair_messages(self, prompt: templates.Conversation, response_a: str, response_b: str, rubric: str | None):
        """The judge prompt that shows response_a as A and response_b as B."""
        return templates.pairwise_messages(prompt, response_a, response_b, self._ties)

    def _in_both_orders(self, comparisons: Sequence[Comparison]) -> list[list[dict]]:
        """Each comparison's two judge prompts: its first response as A, then as B (a vision judge's with the
        prompt's images)."""
        conversations = []
        for prompt, first, second, rubric in comparisons:
            text, images = self.split_images(prompt)
            conversations += [self.shown(self.pair_messages(text, first, second, rubric), images)]
            conversations += [self.shown(self.pair_messages(text, second, first, rubric), images)]
        return conversations

    def read_generations(self, items: Sequence[JudgeItem], results: Sequence) -> list[Verdict]:
        names = ("completion", "reference")
        return [self._verdict(results[2 * i : 2 * i + 2], names) for i in range(len(items))]

    def compare_batch(self, items: Sequence[ComparisonItem]) -> list[Verdict]:
        """The probability that each response_a is better than its response_b."""
        comparisons = [(item.prompt, item.response_a, item.response_b, item.rubric) for item in items]
        return self._compare(comparisons, ("response_a", "response_b"))

    def _compare(self, comparisons: Sequence[Comparison], names: tuple[str, str]) -> list[Verdict]:
        """One verdict per comparison, named `names` (first response, second response) in the metadata."""
        results = self._generate(self._in_both_orders(comparisons))
        return [self._verdict(results[2 * i : 2 * i + 2], names) for i in range(len(comparisons))]

    def _verdict(self, orders: list, names: tuple[str, str]) -> Verdict:
        answers: list[Answer] = []
        for letter, result in zip(FIRST_RESPONSE_LETTERS, orders, strict=True):
            answer = result if isinstance(result, Verdict) else self._read(result, self._parse)
            if isinstance(answer, Verdict):
                order = f"the {names[0]} as response {letter}"
                return Verdict.failed(f"judging {order}: {answer.error}", order=order, **answer.metadata)
            answers.append(answer)
        shown = list(zip(answers, FIRST_RESPONSE_LETTERS, strict=True))  # each order's answer, first response's letter
        order_scores = [_first_response_probability(answer, letter) for answer, letter in shown]
        verdicts = [_named(answer.value, letter, names) for answer, letter in shown]
        explanation = "\n\n".join(f"[{names[0]} as {letter}] {answer.reasoning}" for answer, letter in shown)
        metadata = {
            "order_scores": order_scores,
            "verdicts": verdicts,
            ORDERS_AGREE: verdicts[0] == verdicts[1],
            "score_mode": self._config.score_mode,
            "generated_tokens": [a.generated_tokens for a in answers],
        }
        return Verdict(sum(order_scores) / len(order_scores), explanation, metadata)

    def _parse(self, text: str) -> templates.Judgement:
        return templates.parse_pairwise(text, self._verdicts)


def _named(verdict: str, letter: str, names: tuple[str, str]) -> str:
    """The name of the response a verdict calls better, the first response being shown as `letter`; or tie."""
    if verdict == templates.PAIRWISE_TIE:
        return templates.PAIRWISE_TIE
    return names[0] if verdict == letter else names[1]


def _first_response_probability(answer: Answer, letter: str) -> float:
    """How likely the judge found the response shown as `letter` the better one, a tie counting half: its
    probabilities of the letter and of the tie (expected mode), else 1, 0.5 or 0 by the verdict it generated."""
    if answer.probabilities is None:
        return {letter: 1.0, templates.PAIRWISE_TIE: 0.5}.get(answer.value, 0.0)
    return answer.probabilities[letter] + 0.5 * answer.probabilities.get(templates.PAIRWISE_TIE, 0.0)
