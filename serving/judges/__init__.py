"""The judges the server can host, behind one interface (`Judge.score_batch`, `Judge.compare_batch`), and how
to load one."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from judge_rewards.protocol.judge_spec import SPEC_FILE, JudgeSpec, load_judge_spec

from ..config import JudgeConfig
from .base import BackendUnavailable, ComparisonItem, ComparisonUnsupported, Judge, JudgeIdentity, JudgeItem, Verdict

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
    if config.judge == "rule":
        from .rule import RuleJudge

        return RuleJudge(config)
    from .engine_choice import choose_backend

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
    if kind == "scalar":
        from .scalar import ScalarJudge

        declared = spec.kind == "scalar" and (Path(config.model) / SPEC_FILE).is_file()
        return ScalarJudge(config, spec if declared else JudgeSpec(kind="scalar"), calibrated=declared)
    if config.truncation != "none":
        raise ValueError(f"--truncation {config.truncation} is for scalar judges; {config.model} is a {kind} judge")
    if spec.prompt_format == "pairwise":
        from .pairwise import PairwiseJudge

        return PairwiseJudge(config)
    from .generative import GenerativeJudge

    return GenerativeJudge(config)
