"""What an exported judge directory is, written next to its HF files as `judge.json`.

The training recipes write it when they export a checkpoint; the judge server and the evaluation read
it to know how to prompt the model and how to map its output to a score in [0, 1].

- scalar: a sequence-classification model with one label (Bradley-Terry). Its raw reward r is mapped
  to sigmoid((r - reward_center) / reward_scale). With center and scale taken from the rewards of the
  validation responses at export time, 0.5 means "a typical response", and the BT meaning of a reward
  difference (log-odds of preference) survives up to the scale.
  A multi-attribute scalar judge (`attributes` set) has one label per attribute, each predicting the
  attribute on the 0..ATTRIBUTE_MAX scale; its score is their combination by `attribute_weights`.
- generative: a causal LM prompted with the template of `judge_core.protocol.templates` it was trained on
  (`prompt_format`). A pointwise judge's <score>N</score> is mapped to N / 4; an unparsable answer is an
  error, never a score. `reference_in_prompts` says whether it learned to read a reference answer.
  A pairwise judge compares two answers (<better>A|B</better>): the server asks it about
  a /judge request's completion against the request's reference `answer`, in both orders, and answers
  /compare with it. `pairwise_ties` says whether its prompts offered the verdict tie (<better>tie</better>),
  worth half to each response.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

SPEC_FILE = "judge.json"
JUDGE_KINDS = ("scalar", "generative")
PROMPT_FORMATS = ("pointwise", "pairwise")
# A multi-attribute scalar judge predicts each attribute on HelpSteer2's rating scale, 0..ATTRIBUTE_MAX.
ATTRIBUTE_MAX = 4.0
HELPSTEER2_ATTRIBUTES = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")
# The weights NVIDIA recommends for reading Nemotron-4-340B-Reward (trained on HelpSteer2, arXiv 2406.08673)
# as one scalar reward: its model card (huggingface.co/nvidia/Nemotron-4-340B-Reward, "Model Overview") gives
# [0, 0, 0, 0, 0.3, 0.74, 0.46, 0.47, -0.33] for its nine outputs, whose last five are these attributes in this
# order (the first four are not trained). Weights are tuned per model, not a property of the data: an earlier
# card of nvidia/Llama3-70B-SteerLM-RM recommended helpfulness 0.65, correctness 0.8, coherence 0.45, the rest 0.
# The paper's own text could not be read here to check it; these are the model card's numbers.
HELPSTEER2_ATTRIBUTE_WEIGHTS = dict(zip(HELPSTEER2_ATTRIBUTES, (0.3, 0.74, 0.46, 0.47, -0.33), strict=True))


def sigmoid(z: float) -> float:
    """1 / (1 + e^-z), without overflow for large |z|."""
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def check_attribute_weights(weights: dict[str, float], attributes: list[str]) -> None:
    """Refuses weights that name no attribute, are not finite numbers, or are all zero."""
    for name, weight in weights.items():
        if name not in attributes:
            raise ValueError(f"attribute_weights names {name!r}, which is not one of the attributes {attributes}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise ValueError(f"attribute_weights[{name!r}] must be a finite number, got {weight!r}")
    if not any(weights.values()):
        raise ValueError(f"attribute_weights must give at least one attribute a non-zero weight, got {weights}")


def parse_attribute_weights(text: str, attributes: list[str]) -> dict[str, float]:
    """Weights written as `name=value,name=value` (the --attribute-weights flag), checked against `attributes`."""
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, equals, value = (piece.strip() for piece in part.partition("="))
        if not equals or not name:
            raise ValueError(f"attribute weight {part.strip()!r} is not name=value")
        if name in weights:
            raise ValueError(f"attribute weight {name!r} is given twice")
        try:
            weights[name] = float(value)
        except ValueError:
            raise ValueError(f"attribute weight {part.strip()!r}: {value!r} is not a number") from None
    check_attribute_weights(weights, attributes)
    return weights


@dataclass
class JudgeSpec:
    kind: str
    reward_center: float = 0.0
    reward_scale: float = 1.0
    prompt_format: str = "pointwise"  # generative judges: the template they were trained on
    # Pointwise judges: whether every training prompt showed a reference answer (false: none did; null: unknown,
    # or some did). The judge server serves a true one only with --reference-from-answer, a false one only without.
    reference_in_prompts: bool | None = None
    # Pairwise judges: whether every training prompt offered the verdict tie (false: none did; null: unknown, or
    # some did). The judge server offers the tie exactly when this is true.
    pairwise_ties: bool | None = None
    attributes: list[str] = field(default_factory=list)  # scalar judges with one output per attribute
    attribute_weights: dict[str, float] = field(default_factory=dict)  # the score's weight of each attribute
    trained_with: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in JUDGE_KINDS:
            raise ValueError(f"judge kind {self.kind!r} is not one of {JUDGE_KINDS}")
        if self.prompt_format not in PROMPT_FORMATS:
            raise ValueError(f"prompt_format {self.prompt_format!r} is not one of {PROMPT_FORMATS}")
        if not (self.reference_in_prompts is None or isinstance(self.reference_in_prompts, bool)):
            raise ValueError(f"reference_in_prompts must be true, false or null, got {self.reference_in_prompts!r}")
        if self.reference_in_prompts is not None and (self.kind, self.prompt_format) != ("generative", "pointwise"):
            raise ValueError("reference_in_prompts is for pointwise generative judges")
        if not (self.pairwise_ties is None or isinstance(self.pairwise_ties, bool)):
            raise ValueError(f"pairwise_ties must be true, false or null, got {self.pairwise_ties!r}")
        if self.pairwise_ties is not None and (self.kind, self.prompt_format) != ("generative", "pairwise"):
            raise ValueError("pairwise_ties is for pairwise generative judges")
        if not self.reward_scale > 0:
            raise ValueError(f"reward_scale must be positive, got {self.reward_scale}")
        self._check_attributes()

    def _check_attributes(self) -> None:
        if not isinstance(self.attributes, list) or not isinstance(self.attribute_weights, dict):
            raise ValueError("attributes must be a list of names and attribute_weights an object of name: weight")
        if not self.attributes:
            if self.attribute_weights:
                raise ValueError("attribute_weights without attributes")
            return
        if self.kind != "scalar":
            raise ValueError(f"attributes are for scalar judges; this judge is {self.kind}")
        if not all(isinstance(name, str) and name for name in self.attributes):
            raise ValueError(f"attributes must be non-empty names, got {self.attributes}")
        if len(set(self.attributes)) != len(self.attributes):
            raise ValueError(f"attributes must be unique, got {self.attributes}")
        check_attribute_weights(self.attribute_weights, self.attributes)

    def scalar_probability(self, raw_reward: float) -> float:
        """A scalar judge's raw reward mapped to [0, 1]."""
        return sigmoid((raw_reward - self.reward_center) / self.reward_scale)

    def save(self, model_dir: str | Path) -> Path:
        path = Path(model_dir) / SPEC_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path


def kind_from_architectures(architectures: list[str] | None) -> str | None:
    """The judge kind an HF config's `architectures` implies, if any."""
    for arch in architectures or []:
        if arch.endswith(("ForSequenceClassification", "ForTokenClassification")):
            return "scalar"
        if arch.endswith("ForCausalLM"):
            return "generative"
    return None


def load_judge_spec(model_dir: str | Path) -> JudgeSpec:
    """The spec saved with a judge, or one inferred from its config.json when none was saved."""
    model_dir = Path(model_dir)
    spec_path = model_dir / SPEC_FILE
    if spec_path.is_file():
        try:
            return JudgeSpec(**json.loads(spec_path.read_text()))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{spec_path}: invalid judge spec: {err}") from err
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{model_dir} has neither {SPEC_FILE} nor config.json: not a model directory")
    kind = kind_from_architectures(json.loads(config_path.read_text()).get("architectures"))
    if kind is None:
        raise ValueError(f"{config_path}: cannot tell the judge kind from `architectures`; add {SPEC_FILE}")
    return JudgeSpec(kind=kind)
