"""The judges the server can host, behind one interface (`Judge.score_batch`, `Judge.compare_batch`), and how
to load one."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from judge_core.protocol.judge_spec import SPEC_FILE, JudgeSpec, load_judge_spec
from judge_models.config import JudgeConfig
from judge_models.engine import BackendUnavailable

from .base import ComparisonItem, ComparisonUnsupported, Judge, JudgeIdentity, JudgeItem, Verdict

__all__ = [
    "BackendUnavailable",
    "ComparisonItem",
    "ComparisonUnsupported",
    "Judge",
    "JudgeIdentity",
    "JudgeItem",
    "Verdict",
    "load_judge",
]

log = logging.getLogger(__name__)


def load_judge(config: JudgeConfig) -> Judge:
    """The judge `config` names: its --judge kind, else the kind the model directory declares; a model judge on
    the engine --backend names (auto: vLLM where it can be imported), its identity saying which and why."""
    if config.judge_template and config.judge == "rule":
        raise ValueError("--judge-template is for generative judges; --judge rule has no prompt")
    if config.judge == "rule":
        from .rule import RuleJudge

        return RuleJudge(config)
    from judge_models.engine import choose_backend

    choice = choose_backend(config.backend)
    log.info("backend %s (%s)", choice.name, choice.reason)
    judge = _load_model_judge(dataclasses.replace(config, backend=choice.name))
    judge.identity = dataclasses.replace(judge.identity, backend_reason=choice.reason)
    return judge


def _load_model_judge(config: JudgeConfig) -> Judge:
    spec = load_judge_spec(config.model)
    kind = config.judge or spec.kind
    if kind != spec.kind:
        log.warning("serving %s as a %s judge although it declares kind %s", config.model, kind, spec.kind)
    if config.reference_from_answer and (kind, spec.prompt_format) != ("generative", "pointwise"):
        served = "a scalar" if kind == "scalar" else "a pairwise"
        raise ValueError(
            f"--reference-from-answer is for pointwise generative judges; {config.model} is {served} judge"
        )
    if kind == "scalar":
        if config.judge_template:
            raise ValueError(f"--judge-template is for generative judges; {config.model} is a scalar judge")
        if config.backend == "openai":
            raise ValueError(
                f"--backend openai serves generative judges (pointwise and pairwise); {config.model} is a scalar "
                "judge: serve it with --backend vllm or transformers"
            )
        from .scalar import ScalarJudge

        declared = spec.kind == "scalar" and (Path(config.model) / SPEC_FILE).is_file()
        return ScalarJudge(config, spec if declared else JudgeSpec(kind="scalar"), calibrated=declared)
    if config.truncation != "none":
        raise ValueError(f"--truncation {config.truncation} is for scalar judges; {config.model} is a {kind} judge")
    if config.judge_template:
        return _template_judge(config, spec)
    if spec.prompt_format == "pairwise":
        from .pairwise import PairwiseJudge

        return PairwiseJudge(config, ties=spec.pairwise_ties is True)
    _check_reference_use(config, spec)
    from .generative import GenerativeJudge

    return GenerativeJudge(config)


def _template_judge(config: JudgeConfig, spec: JudgeSpec) -> Judge:
    from judge_core.judge_template import load_template

    from .template import PairwiseTemplateJudge, TemplateJudge

    if config.reference_from_answer:
        raise ValueError(
            "--judge-template shows the answer where its {answer} is; --reference-from-answer does not apply"
        )
    template = load_template(config.judge_template)
    return PairwiseTemplateJudge(config, template) if template.pairwise else TemplateJudge(config, template)


def _check_reference_use(config: JudgeConfig, spec: JudgeSpec) -> None:
    """A pointwise judge is shown a reference answer exactly when it was trained with one, where judge.json says."""
    if spec.reference_in_prompts is True and not config.reference_from_answer:
        raise ValueError(
            f"{config.model} was trained with a reference answer in every prompt ({SPEC_FILE}: reference_in_prompts "
            f"true); serve it with --reference-from-answer, so that each request's `answer` reaches it"
        )
    if spec.reference_in_prompts is False and config.reference_from_answer:
        raise ValueError(
            f"{config.model} was trained without reference answers ({SPEC_FILE}: reference_in_prompts false); "
            f"--reference-from-answer would show it one it never learned to read"
        )
