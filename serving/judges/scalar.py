"""Scalar judge: a sequence-classification model reads the conversation. With one label (Bradley-Terry) its
reward is mapped to [0, 1] by the judge's JudgeSpec; with one label per attribute of judge.json's
`attributes` (attribute regression) each output predicts its attribute on the 0..ATTRIBUTE_MAX scale, and
the score combines them by the attribute weights.

A reward model trained elsewhere (an HF sequence classifier without judge.json, e.g. Skywork-Reward-V2) is read
as its authors read it: the ids of `tokenizer.apply_chat_template(messages, tokenize=True)` (one BOS, see
hf.bos_handling), the head's output with no activation, reported as `raw_reward`; its score is sigmoid(raw_reward),
uncalibrated. A head of several outputs that judge.json does not name serves them by the config's id2label names,
combined by --attribute-weights into the raw reward.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from judge_core.protocol import templates
from judge_core.protocol.judge_api import prompt_key
from judge_core.protocol.judge_spec import ATTRIBUTE_MAX, JudgeSpec, parse_attribute_weights, sigmoid
from judge_models import packing
from judge_models.config import JudgeConfig
from judge_models.engine import ScalarEngine

from . import hf
from .base import ComparisonItem, Judge, JudgeItem, Verdict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Read:
    """The model's outputs for one judge input, one per label."""

    outputs: list[float]
    input_tokens: int
    truncated_tokens: int = 0


def prompt_groups(items: Sequence[JudgeItem]) -> list[list[int]]:
    """The items' indices grouped by prompt (equal text, or equal messages), in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        groups.setdefault(prompt_key(item.prompt), []).append(index)
    return list(groups.values())


class ScalarJudge(Judge):
    def __init__(self, config: JudgeConfig, spec: JudgeSpec, calibrated: bool = True):
        """`calibrated`: judge.json defines this scalar judge; without it (a reward model trained elsewhere) the
        spec is the default one, and the score is sigmoid(raw reward)."""
        from transformers import AutoConfig

        self._config = config
        self._spec = spec
        self._calibrated = calibrated
        self._tokenizer = hf.load_tokenizer(config.model, padding_side="right")
        model_config = AutoConfig.from_pretrained(config.model)
        self._labels = self._head_labels(model_config)
        self._check_attention_window(model_config)
        self._weights = self._attribute_weights()
        self.identity = hf.identity(config, "scalar", self._scoring(), hf.bos_handling(self._tokenizer)[1])
        self.computes_shared_prompts_once = config.shares_prompts
        self._engine = self._load_engine()

    def _load_engine(self) -> ScalarEngine:
        config = self._config
        if config.backend == "vllm":
            from judge_models.vllm_engine import VllmScalarEngine

            return VllmScalarEngine(config)
        from transformers import AutoModelForSequenceClassification

        from judge_models.transformers_engine import TransformersScalarEngine, resolve_device, resolve_dtype

        device = resolve_device(config.device)
        model = AutoModelForSequenceClassification.from_pretrained(
            config.model, torch_dtype=resolve_dtype(config.dtype, device)
        )
        model.config.pad_token_id = self._tokenizer.pad_token_id  # _check_pad_token: None or equal to it
        prompt_once = config.shares_prompts and packing.packs_fast(device)
        if config.shares_prompts and not prompt_once:
            log.warning(
                "prompt-once off on %s: packed attention without flash-attn is slower there than padding", device
            )
            self.computes_shared_prompts_once = False
        return TransformersScalarEngine(
            model.to(device).eval(),
            self._tokenizer.pad_token_id,
            config.max_padding_fraction,
            config.max_tokens_per_forward,
            prompt_once=prompt_once,
        )

    def _attribute_weights(self) -> dict[str, float]:
        """Every named output's weight: --attribute-weights when given (names left out weigh 0), else judge.json's.
        A head whose outputs judge.json does not name has no default weights: the flag must say how they combine."""
        names = self._spec.attributes or self._labels
        text = self._config.attribute_weights
        if text is not None and not names:
            raise ValueError(
                f"--attribute-weights needs a multi-attribute judge; {self._config.model} has no attributes"
            )
        if text is None and self._labels:
            raise ValueError(
                f"{self._config.model}: the head has {len(self._labels)} outputs, named by its config's id2label "
                f"{self._labels}, and no judge.json weighs them: give --attribute-weights name=value,... to say "
                "how they make one reward"
            )
        try:
            weights = self._spec.attribute_weights if text is None else parse_attribute_weights(text, names)
        except ValueError as err:
            raise ValueError(f"--attribute-weights {text!r}: {err}") from None
        return {name: float(weights.get(name, 0.0)) for name in names}

    def _head_labels(self, model_config) -> list[str]:
        """The names of a multi-output head that judge.json does not name: its config's id2label, in output order
        (none for one output, or for judge.json's attributes). Checks the head against judge.json and the pad id."""
        attributes = self._spec.attributes
        if attributes and model_config.num_labels != len(attributes):
            raise ValueError(
                f"{self._config.model}: the judge has {len(attributes)} attributes in judge.json, the model has "
                f"num_labels={model_config.num_labels}"
            )
        if not attributes and self._calibrated and model_config.num_labels != 1:
            raise ValueError(
                f"{self._config.model}: the judge has one label (no attributes in judge.json), the model has "
                f"num_labels={model_config.num_labels}"
            )
        self._check_pad_token(model_config)
        if attributes or model_config.num_labels == 1:
            return []
        return [str(model_config.id2label[index]) for index in range(model_config.num_labels)]

    def _check_attention_window(self, model_config) -> None:
        """The transformers backend's padded and packed forwards build their own attention masks, which have no
        sliding window: a model with one (Gemma 2, Mistral) would read a longer input otherwise than its own
        forward does, so such inputs are not allowed."""
        window = getattr(model_config, "sliding_window", None)
        layer_types = getattr(model_config, "layer_types", None) or ["sliding_attention"]
        if self._config.backend != "transformers" or not window or "sliding_attention" not in layer_types:
            return
        if self._config.max_input_tokens > window:
            raise ValueError(
                f"{self._config.model}: the model attends through a sliding window of {window} tokens, which the "
                f"transformers backend's forwards do not apply: set --max-input-tokens {window} or less (now "
                f"{self._config.max_input_tokens}) so that no input reaches past it"
            )

    def _scoring(self) -> str:
        """What the score is, for /health."""
        if self._spec.attributes:
            return "score = the weighted attribute predictions (each on 0..4) mapped linearly to [0, 1]"
        if self._labels:
            return (
                "raw_reward = the --attribute-weights sum of the head's outputs (named by the config's id2label, no "
                "activation), each in metadata label_outputs; score = sigmoid(raw_reward), uncalibrated"
            )
        if self._calibrated:
            return (
                f"score = sigmoid((raw_reward - {self._spec.reward_center:g}) / {self._spec.reward_scale:g}) from "
                "judge.json's calibration; raw_reward (metadata) is the head's output"
            )
        return (
            "raw_reward (metadata) is the model's own output, no activation: the figure its authors report; "
            "score = sigmoid(raw_reward), uncalibrated (no judge.json), so 0.5 is a raw reward of 0"
        )

    def _check_pad_token(self, model_config) -> None:
        if model_config.pad_token_id not in (None, self._tokenizer.pad_token_id):
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
        return [read if isinstance(read, Verdict) else self._verdict(read) for read in self._read(items)]

    def compare_batch(self, items: Sequence[ComparisonItem]) -> list[Verdict]:
        """sigmoid(r_a - r_b) of the raw rewards (the Bradley-Terry probability), both responses of every
        comparison scored in one batched pass. Each response is scored alone, so their order cannot matter."""
        pairs = [(item.prompt, response) for item in items for response in (item.response_a, item.response_b)]
        reads = self._read([JudgeItem(prompt, response) for prompt, response in pairs])
        return [self._comparison(reads[2 * index], reads[2 * index + 1]) for index in range(len(items))]

    def _read(self, items: Sequence[JudgeItem]) -> list[_Read | Verdict]:
        """Per item, the model's outputs, or an error verdict saying why they cannot be read; one engine call,
        in which the items that share a prompt form a group."""
        encodings = self.input_ids(items)
        cut = [0] * len(encodings)
        if self._config.truncation == "left":
            encodings, cut = map(list, zip(*(self._left_truncated(ids) for ids in encodings), strict=True))
        reads: list[_Read | Verdict | None] = list(hf.length_verdicts(encodings, self._config.max_input_tokens))
        pad_token_id = self._tokenizer.pad_token_id
        for index, ids in enumerate(encodings):
            if reads[index] is None and ids[-1] == pad_token_id:
                reads[index] = Verdict.failed("the judge input ends with the pad token; its reward cannot be read")
        readable = [i for i, read in enumerate(reads) if read is None]
        groups = prompt_groups([items[i] for i in readable])
        outputs = self._engine.raw_outputs([encodings[i] for i in readable], groups)
        for index, row in zip(readable, outputs, strict=True):
            reads[index] = self._checked(row, len(encodings[index]), cut[index])
        return reads

    def _left_truncated(self, ids: list[int]) -> tuple[list[int], int]:
        """(ids cut to --max-input-tokens from the left, tokens cut): a leading BOS stays, then the conversation's
        last tokens, as a tokenizer with truncation_side="left" keeps them when it adds the BOS itself."""
        limit = self._config.max_input_tokens
        if len(ids) <= limit:
            return ids, 0
        head = ids[:1] if ids[0] == self._tokenizer.bos_token_id else []
        return head + ids[len(ids) - limit + len(head) :], len(ids) - limit

    def _checked(self, outputs: list[float], input_tokens: int, truncated_tokens: int) -> _Read | Verdict:
        if not all(math.isfinite(value) for value in outputs):
            return Verdict.failed(f"the judge returned a non-finite output ({outputs})", input_tokens=input_tokens)
        return _Read(outputs, input_tokens, truncated_tokens)

    def _verdict(self, read: _Read) -> Verdict:
        verdict = self._attribute_verdict(read) if self._spec.attributes else self._reward_verdict(read)
        if self._config.truncation != "none":
            verdict.metadata["truncated_tokens"] = read.truncated_tokens
            if read.truncated_tokens:
                verdict.explanation += (
                    f"; --truncation left cut {read.truncated_tokens} tokens from the conversation's start (a "
                    "leading BOS stays)"
                )
        return verdict

    def _reward_verdict(self, read: _Read) -> Verdict:
        reward = self._raw_reward(read)
        spec = self._spec
        metadata = {"raw_reward": reward, "input_tokens": read.input_tokens}
        if self._labels:
            metadata["label_outputs"] = dict(zip(self._labels, read.outputs, strict=True))
            metadata["attribute_weights"] = self._weights
            explanation = "outputs " + ", ".join(f"{n} {v:.4f}" for n, v in metadata["label_outputs"].items())
            return Verdict(
                sigmoid(reward), f"{explanation}; reward = weighted sum {reward:.4f}; score = sigmoid(reward)", metadata
            )
        if not self._calibrated:
            return Verdict(sigmoid(reward), f"raw reward {reward:.4f}; score = sigmoid(reward), uncalibrated", metadata)
        return Verdict(
            score=spec.scalar_probability(reward),
            explanation=f"reward {reward:.4f}; "
            f"score = sigmoid((reward - {spec.reward_center:g}) / {spec.reward_scale:g})",
            metadata=metadata,
        )

    def _attribute_verdict(self, read: _Read) -> Verdict:
        predictions = dict(zip(self._spec.attributes, read.outputs, strict=True))
        detailed = {name: min(max(value / ATTRIBUTE_MAX, 0.0), 1.0) for name, value in predictions.items()}
        return Verdict(
            score=self._weighted_score(detailed),
            explanation="weighted attributes: "
            + ", ".join(f"{name} {value:.2f}/{ATTRIBUTE_MAX:g}" for name, value in predictions.items()),
            metadata={
                "attribute_predictions": predictions,
                "attribute_weights": self._weights,
                "input_tokens": read.input_tokens,
            },
            detailed_scores=detailed,
        )

    def _weighted_score(self, detailed: dict[str, float]) -> float:
        """sum w_i d_i over the attributes in [0, 1], mapped linearly from its range over the unit box to [0, 1]:
        1 when every positively weighted attribute is at its best and every negatively weighted one at 0."""
        weights = self._weights
        lowest = sum(weight for weight in weights.values() if weight < 0)
        span = sum(abs(weight) for weight in weights.values())
        return (sum(weights[name] * value for name, value in detailed.items()) - lowest) / span

    def _raw_reward(self, read: _Read) -> float:
        """The one output, or the weighted sum of the raw outputs of a multi-output head (a comparison's reward)."""
        names = self._spec.attributes or self._labels
        if not names:
            return read.outputs[0]
        return sum(self._weights[name] * value for name, value in zip(names, read.outputs, strict=True))

    def _comparison(self, read_a: _Read | Verdict, read_b: _Read | Verdict) -> Verdict:
        for name, read in (("response_a", read_a), ("response_b", read_b)):
            if isinstance(read, Verdict):
                return Verdict.failed(f"{name}: {read.error}", **read.metadata)
        reward_a, reward_b = self._raw_reward(read_a), self._raw_reward(read_b)
        reward = "weighted attribute sum" if self._spec.attributes or self._labels else "reward"
        return Verdict(
            score=sigmoid(reward_a - reward_b),
            explanation=f"{reward} of response_a {reward_a:.4f}, of response_b {reward_b:.4f}; score = sigmoid(a - b)",
            metadata={
                "raw_reward_a": reward_a,
                "raw_reward_b": reward_b,
                "input_tokens": [read_a.input_tokens, read_b.input_tokens],
            },
        )
