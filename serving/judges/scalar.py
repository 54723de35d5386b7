"""Scalar (Bradley-Terry) judge: a sequence-classification model with one label reads the conversation
and its reward is mapped to [0, 1] by the judge's JudgeSpec."""

from __future__ import annotations

import math
from collections.abc import Sequence

from judge_rewards.protocol import templates
from judge_rewards.protocol.judge_spec import JudgeSpec

from ..config import JudgeConfig
from . import hf, scalar_model
from .base import Judge, JudgeItem, Verdict


class ScalarJudge(Judge):
    def __init__(self, config: JudgeConfig, spec: JudgeSpec):
        from transformers import AutoModelForSequenceClassification

        self._config = config
        self._spec = spec
        self.identity = hf.identity(config, "scalar")
        self._device = hf.resolve_device(config.device)
        self._tokenizer = hf.load_tokenizer(config.model, padding_side="right")
        self._model = (
            AutoModelForSequenceClassification.from_pretrained(
                config.model, torch_dtype=hf.resolve_dtype(config.dtype, self._device)
            )
            .to(self._device)
            .eval()
        )
        self._check_head()

    def _check_head(self) -> None:
        model_config = self._model.config
        if model_config.num_labels != 1:
            raise ValueError(
                f"{self._config.model}: a scalar judge has num_labels=1, this model has {model_config.num_labels}"
            )
        if model_config.pad_token_id is None:
            model_config.pad_token_id = self._tokenizer.pad_token_id
        if model_config.pad_token_id != self._tokenizer.pad_token_id:
            # The model reads the reward at the last token that is not its pad id: both must agree.
            raise ValueError(
                f"{self._config.model}: config pad_token_id {model_config.pad_token_id} differs from the "
                f"tokenizer's {self._tokenizer.pad_token_id}"
            )

    def input_ids(self, items: Sequence[JudgeItem]) -> list[list[int]]:
        """The token ids the judge reads for each item, exactly as its Bradley-Terry training read its pairs."""
        conversations = [templates.conversation_messages(item.prompt, item.completion) for item in items]
        return templates.conversation_token_ids(self._tokenizer, conversations)

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        encodings = self.input_ids(items)
        verdicts = hf.length_verdicts(encodings, self._config.max_input_tokens)
        pad_token_id = self._tokenizer.pad_token_id
        for index, ids in enumerate(encodings):
            if verdicts[index] is None and ids[-1] == pad_token_id:
                verdicts[index] = Verdict.failed("the judge input ends with the pad token; its reward cannot be read")
        readable = [i for i, verdict in enumerate(verdicts) if verdict is None]
        rewards = scalar_model.sequence_rewards(
            self._model, [encodings[i] for i in readable], pad_token_id, self._config.max_padding_fraction
        )
        for index, reward in zip(readable, rewards, strict=True):
            verdicts[index] = self._verdict(reward, len(encodings[index]))
        return verdicts

    def _verdict(self, reward: float, input_tokens: int) -> Verdict:
        if not math.isfinite(reward):
            return Verdict.failed(f"the judge returned a non-finite reward ({reward})", input_tokens=input_tokens)
        spec = self._spec
        return Verdict(
            score=spec.scalar_probability(reward),
            explanation=f"reward {reward:.4f}; "
            f"score = sigmoid((reward - {spec.reward_center:g}) / {spec.reward_scale:g})",
            metadata={"raw_reward": reward, "input_tokens": input_tokens},
        )
