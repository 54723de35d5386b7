"""Reward specs (judge_rewards.reward_spec, composed_reward): components mixed, routed and tagged, against real
judge servers on 127.0.0.1 (the project's rule judge, which can be killed, and the planted FaultyJudgeServer,
which scores "What is n?" n / 1000 where the rules give 1.0)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from judge_rewards import ConfigError, JudgeRewardSystem, JudgeUnavailableError, verl_reward
from judge_rewards.composed_reward import ComponentFailure
from judge_rewards.trl_reward import JudgeReward
from tests.group_judge_server import GroupJudgeServer
from tests.reward_adapter_servers import FaultyJudgeServer, item, start_rule_server

FAST = {"max_retries": 0, "timeout": 5.0, "batch_timeout": 0.01, "use_cache": True}


@pytest.fixture
def faulty():
    server = FaultyJudgeServer()
    yield server
    server.close()


def spec(url: str, **keys) -> dict:
    """A judge (weight 0.5) and the arithmetic rule (weight 0.5), with `keys` on top."""
    components = {"judge": {"type": "judge", "weight": 0.5}, "arithmetic": {"type": "rule", "weight": 0.5}}
    return {"judge_url": url, **FAST, "components": components, **keys}


@pytest.mark.parametrize(
    "change, key",
    [
        ({"components": {"judge": {"type": "oracle"}}}, "components.judge.type"),
        ({"components": {"judge": {"type": "judge", "weight": "heavy"}}}, "components.judge.weight"),
        ({"components": {"judge": {"type": "judge", "weight": True}}}, "components.judge.weight"),
        ({"components": {"judge": {"type": "judge", "timeout": "soon"}}}, "components.judge.timeout"),
        ({"components": {"r": {"type": "rule", "judge_url": "http://x:1"}}}, "components.r"),
        ({"components": {"r": {"type": "rule", "on_failure": "rule"}}}, "components.r.on_failure"),
        ({"specs": {"math": {"components": ["arithmetic", "nosuch"]}}}, "specs.math.components"),
        ({"specs": {"math": {"components": ["judge"]}}, "routes": {"gsm8k": "maths"}}, "routes.gsm8k"),
        ({"combine": "product"}, "combine"),
        ({"combine": "gate", "gate": "judge"}, "gate"),
        ({"specs": {"a": {"components": ["judge"]}, "b": {"components": ["arithmetic"]}}}, "routes"),
    ],
)
def test_a_bad_spec_fails_at_start_up_naming_its_key(change, key):
    with pytest.raises(ConfigError, match=rf"reward config {key}\b"):
        JudgeRewardSystem({**spec("http://127.0.0.1:9"), **change})


def test_a_spec_of_rules_alone_checks_the_adapter_keys_beside_it_and_reads_its_health_thresholds():
    rules_only = {"components": {"arithmetic": {"type": "rule"}}}
    with pytest.raises(ConfigError, match=r"unknown reward config keys \['health_windw'\]"):
        JudgeRewardSystem({**rules_only, "health_windw": 8})
    system = JudgeRewardSystem({**rules_only, "health_window": 8})  # no judge_url: no judge is called
    for _ in range(20):
        system.reward("What is 2 + 2?", "4", "4")
    assert system.health_figures()["health_window"] == 8  # the rewards held: at most the configured window


def test_a_spec_file_holds_the_spec_keys_and_the_config_the_rest(tmp_path, faulty):
    path = tmp_path / "spec.yaml"
    path.write_text("components:\n  judge: {type: judge}\n  arithmetic: {type: rule, weight: 0.5}\n")
    system = JudgeRewardSystem({"judge_url": faulty.url, **FAST, "reward_spec": str(path)})
    assert system.reward("What is 600?", "\\boxed{600}", "600")["reward"] == pytest.approx(0.6 + 0.5)
    assert "component/arithmetic" in system.reward("What is 600?", "600", "600")
    path.write_text("components: {judge: {type: judge}}\njudge_url: http://elsewhere:1\n")
    with pytest.raises(ConfigError, match=r"reward config reward_spec: .*spec.yaml: unknown keys \['judge_url'\]"):
        JudgeRewardSystem({"judge_url": faulty.url, "reward_spec": str(path)})
    path.write_text("combine: min\ncomponents: {judge: {type: judge}}\n")
    with pytest.raises(ConfigError, match=r"spec.yaml sets \['combine'\], which the config sets too"):
        JudgeRewardSystem({"judge_url": faulty.url, "combine": "vote", "reward_spec": str(path)})
    with pytest.raises(ConfigError, match=r"reward_spec: cannot read .*nosuch.yaml"):
        JudgeRewardSystem({"judge_url": faulty.url, "reward_spec": str(tmp_path / "nosuch.yaml")})
    assert JudgeRewardSystem({"judge_url": faulty.url, "reward_spec": None}).route_column is None  # no spec


def test_components_combine_and_every_row_carries_each_components_value_and_source(faulty):
    with JudgeRewardSystem(spec(faulty.url)) as system:
        first, wrong = system.reward_batch([item(600), item(600, "\\boxed{7}")])
        again = system.reward(**item(600))
    assert first["reward"] == pytest.approx(0.5 * 0.6 + 0.5 * 1.0) and first["source"] == "judge"
    assert first["components"]["judge"] == {"reward": 0.6, "source": "judge", "error": None, "weight": 0.5}
    assert first["components"]["arithmetic"]["source"] == "rule" and first["failed"] == {}
    assert (first["component/judge"], first["component/arithmetic"]) == (0.6, 1.0)
    assert wrong["reward"] == pytest.approx(0.3) and wrong["component/arithmetic"] == 0.0
    assert again["source"] == "cache" and again["components"]["judge"]["source"] == "cache"


@pytest.mark.parametrize(
    "combine, right, wrong",
    [("min", 0.6, 0.0), ("gate", 0.6, 0.0), ("vote", 1.0, 0.5), ("weighted_sum", 0.8, 0.3)],
)
def test_each_combine(faulty, combine, right, wrong):
    gate = {"gate": "arithmetic"} if combine == "gate" else {}
    with JudgeRewardSystem(spec(faulty.url, combine=combine, **gate)) as system:
        rewards = system.reward_batch([item(600), item(600, "\\boxed{7}")])
    assert [r["reward"] for r in rewards] == pytest.approx([right, wrong])


def test_rows_are_routed_by_data_source_and_an_unrouted_row_fails_tagged(faulty):
    config = spec(
        faulty.url,
        specs={
            "math": {"components": ["arithmetic", "judge"], "combine": "gate", "gate": "arithmetic"},
            "chat": {"components": {"judge": 1.0}},
        },
        routes={"gsm8k": "math", "chat": "chat"},
    )
    with JudgeRewardSystem(config) as system:
        math_row, chat_row, lost = system.reward_batch(
            [
                {**item(600, "\\boxed{7}"), "data_source": "gsm8k"},
                {**item(600, "\\boxed{7}"), "data_source": "chat"},
                {**item(5), "data_source": "poetry"},
            ],
            return_exceptions=True,
        )
    assert (math_row["spec"], math_row["reward"]) == ("math", 0.0)  # the gate failed: the rule's score
    assert (chat_row["spec"], chat_row["reward"], chat_row["source"]) == ("chat", 0.6, "judge")
    assert math.isnan(chat_row["component/arithmetic"]) and set(chat_row["components"]) == {"judge"}
    assert isinstance(lost, ComponentFailure) and "no route for data_source 'poetry'" in str(lost)


def test_a_rule_component_without_a_reference_fails_its_row_never_a_zero(faulty):
    with JudgeRewardSystem(spec(faulty.url)) as system:
        with pytest.raises(ComponentFailure, match=r"arithmetic \(on_failure=fail\): rule: .*reference"):
            system.reward("What is 5?", "\\boxed{5}")
        spared = spec(faulty.url)
        spared["components"]["arithmetic"]["on_failure"] = "renormalise"
    with JudgeRewardSystem({**spared, "judge_url": faulty.url}) as system:
        reward = system.reward("What is 5?", "\\boxed{5}", "5")  # a reference: both score
        assert reward["failed"] == {}


POLICIES = {
    "renormalise": lambda r: r["reward"] == 1.0 and r["components"]["judge"]["reward"] is None,
    "rule": lambda r: r["reward"] == 1.0 and r["components"]["judge"]["source"] == "rule_fallback",
}


def test_failure_policies_with_the_judge_server_killed_mid_run(tmp_path):
    server = start_rule_server(tmp_path / "server.log")
    systems = {
        policy: JudgeRewardSystem(
            spec(
                server.url,
                circuit_breaker_threshold=1,
                circuit_breaker_timeout=60,
                components={
                    "judge": {"type": "judge", "weight": 0.5, "on_failure": policy},
                    "arithmetic": {"type": "rule", "weight": 0.5},
                },
            )
        )
        for policy in ("renormalise", "rule", "fail")
    }
    try:
        for system in systems.values():
            before = system.reward(**item(3))
            assert (before["reward"], before["source"], before["failed"]) == (1.0, "judge", {})
        server.kill()
        for attempt in ("down", "breaker open"):
            rows = {p: s.reward_batch([item(4), item(5)], return_exceptions=True) for p, s in systems.items()}
            for policy, check in POLICIES.items():
                for row in rows[policy]:
                    assert row["source"] == "rule_fallback" and row["failed"] == {"judge": policy}, attempt
                    assert check(row) and row["components"]["judge"]["error"], attempt
            assert all(isinstance(row, ComponentFailure) for row in rows["fail"])
            assert rows["fail"][0].failed == {"judge": "fail"} and "judge (on_failure=fail)" in str(rows["fail"][0])
        breaker = systems["fail"].get_metrics()["components"]["judge"]["circuit_breaker"]
        assert breaker["state"] == "open" and "Circuit breaker open" in str(rows["fail"][1])
        with pytest.raises(JudgeUnavailableError, match="on_failure=fail"):  # without return_exceptions it raises
            systems["fail"].reward(**item(6))
    finally:
        for system in systems.values():
            system.close()
        server.stop()


def test_health_is_computed_per_judge_component(faulty):
    with JudgeRewardSystem(spec(faulty.url)) as system:
        system.reward_batch([item(600), item(601, "\\boxed{7}"), item(602), item(603, "\\boxed{1}")])
        figures = system.health_figures()
    # the judge gives >= 0.5 to all four, the rules pass two: they agree on half
    assert figures["component/judge/health_judge_rule_agreement"] == 0.5
    assert figures["health_window"] == 4.0


def test_verl_batch_hook_returns_the_same_component_keys_on_every_row(faulty):
    config = spec(
        faulty.url,
        specs={"math": {"components": ["arithmetic", "judge"]}, "chat": {"components": {"judge": 1.0}}},
        routes={"gsm8k": "math", "*": "chat"},
    )
    sources = ["gsm8k", "chat"]
    extra = [{"question": "What is 600?"}, {"question": "What is 600?"}]
    rows = verl_reward.compute_score_batch(sources, ["\\boxed{600}"] * 2, ["600", "600"], extra, **config)
    assert set(rows[0]) == set(rows[1])  # verl appends each key per row: one set of keys for the batch
    assert rows[0]["component/arithmetic"] == 1.0 and math.isnan(rows[1]["component/arithmetic"])
    assert (rows[0]["component/judge/source"], rows[1]["component/arithmetic/source"]) == ("judge", "none")
    assert (rows[0]["spec"], rows[1]["spec"], rows[1]["score"]) == ("math", "chat", 0.6)
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    infos = {key: [row[key] for row in rows] for key in rows[0]}
    metrics = process_validation_metrics(np.array(sources), ["0", "1"], infos)
    assert metrics["gsm8k"]["component/arithmetic"]["mean@1"] == 1.0
    assert metrics["chat"]["component/judge"]["mean@1"] == 0.6


def test_verl_rows_route_by_an_extra_info_column_named_by_route_column(faulty):
    config = spec(
        faulty.url,
        specs={"math": {"components": ["arithmetic", "judge"]}, "chat": {"components": {"judge": 1.0}}},
        routes={"arithmetic": "math", "*": "chat"},
        route_column="subset",
    )
    extra = [{"question": "What is 600?", "subset": "arithmetic"}, {"question": "What is 600?", "subset": "capitals"}]
    rows = verl_reward.compute_score_batch(["offline"] * 2, ["600"] * 2, ["600"] * 2, extra, **config)
    assert [row["spec"] for row in rows] == ["math", "chat"]
    with pytest.raises(ValueError, match=r"route_column 'subset', and a row of data_source 'offline' has no extra_"):
        verl_reward.compute_score_batch(["offline"], ["600"], ["600"], [{"question": "What is 600?"}], **config)


def test_trl_hook_routes_by_column_and_logs_each_component(faulty):
    logged, extras = {}, {}
    reward = JudgeReward({**spec(faulty.url), "routes": {"*": "default"}, "route_column": "task"}, name="mix")
    try:
        values = reward(
            ["What is 600?", "What is 600?"],
            ["\\boxed{600}", "\\boxed{7}"],
            answer=["600", "600"],
            task=["a", "b"],
            log_metric=logged.__setitem__,
            log_extra=extras.__setitem__,
        )
    finally:
        reward.close()
    assert values == pytest.approx([0.8, 0.3])
    assert logged["mix/component/arithmetic"] == 0.5 and logged["mix/component/judge"] == pytest.approx(0.6)
    assert extras["mix_component_arithmetic"] == [1.0, 0.0] and extras["mix_component_judge_source"] == ["judge"] * 2


GROUP_ANSWERS = ["\\boxed{4}", "so \\boxed{4}", "it is surely \\boxed{5}"]  # the planted judge prefers longer


@pytest.fixture
def group_server():
    server = GroupJudgeServer("longer")
    yield server
    server.close()


def group_spec(group_url: str, judge_url: str, **keys) -> dict:
    """A group_judge (weight 0.6, at `group_url`) and the arithmetic rule (weight 0.4), with `keys` on top."""
    components = {
        "pairwise": {"type": "group_judge", "weight": 0.6, "judge_url": group_url},
        "arithmetic": {"type": "rule", "weight": 0.4},
    }
    return {"judge_url": judge_url, **FAST, "components": components, **keys}


def test_a_group_judge_component_scores_a_prompts_group_beside_a_rule(group_server):
    # "longer": the longest answer beats both others (1.0), the middle one beats one of two (0.5), the shortest 0.0
    items = [{"prompt": "What is 4?", "completion": c, "answer": "4", "answer_type": "NUMBER"} for c in GROUP_ANSWERS]
    with JudgeRewardSystem(group_spec(group_server.url, "http://127.0.0.1:9")) as system:
        assert system.config.group_relative
        rows = system.reward_batch(items)
    assert [row["component/pairwise"] for row in rows] == [0.0, 0.5, 1.0]
    assert [row["component/arithmetic"] for row in rows] == [1.0, 1.0, 0.0]
    assert [row["components"]["pairwise"]["source"] for row in rows] == ["judge"] * 3
    assert [row["components"]["arithmetic"]["source"] for row in rows] == ["rule"] * 3
    assert [(row["source"], row["failed"]) for row in rows] == [("judge", {})] * 3
    assert [row["reward"] for row in rows] == pytest.approx([0.4, 0.6 * 0.5 + 0.4, 0.6])
    assert [(b["path"], b["completions"]) for b in group_server.bodies] == [("/judge_group", GROUP_ANSWERS)]


def test_verls_per_sample_compute_score_refuses_a_group_judge_component_by_name(group_server):
    config = group_spec(group_server.url, "http://127.0.0.1:9")
    with pytest.raises(ValueError, match=r"group_judge component 'pairwise'.*compute_score_batch"):
        verl_reward.compute_score("gsm8k", "\\boxed{4}", "4", {"question": "What is 4?"}, **config)
    assert group_server.bodies == []


def test_verls_batch_hook_routes_each_data_source_to_its_spec_with_a_group_judge(group_server):
    config = group_spec(
        group_server.url,
        "http://127.0.0.1:9",
        specs={"math": {"components": {"arithmetic": 1.0}}, "chat": {"components": {"pairwise": 1.0}}},
        routes={"gsm8k": "math", "*": "chat"},
    )
    sources = ["gsm8k", "chat", "gsm8k", "chat", "chat"]
    solutions = ["\\boxed{5}", GROUP_ANSWERS[0], "\\boxed{4}", GROUP_ANSWERS[2], GROUP_ANSWERS[1]]
    extra = [{"question": "What is 4?"}] * 5
    rows = verl_reward.compute_score_batch(sources, solutions, ["4"] * 5, extra, **config)
    assert [row["spec"] for row in rows] == ["math", "chat", "math", "chat", "chat"]
    assert [row["score"] for row in rows] == [0.0, 0.0, 1.0, 1.0, 0.5]
    assert [row["component/pairwise/source"] for row in rows] == ["none", "judge", "none", "judge", "judge"]
    assert [row["component/arithmetic/source"] for row in rows] == ["rule", "none", "rule", "none", "none"]
    # only the chat rows form the prompt's group
    assert [b["completions"] for b in group_server.bodies] == [[GROUP_ANSWERS[0], GROUP_ANSWERS[2], GROUP_ANSWERS[1]]]


def test_openrlhfs_reward_func_logs_each_component_of_a_spec_from_its_config_variable(faulty, monkeypatch):
    from judge_rewards import openrlhf_reward

    monkeypatch.setattr(openrlhf_reward, "_system", None)
    monkeypatch.setenv(openrlhf_reward.CONFIG_ENV, json.dumps(spec(faulty.url)))
    prompts = ["What is 600?", "What is 400?"]
    queries = ["What is 600? \\boxed{600}", "What is 400? \\boxed{7}"]
    try:
        answer = openrlhf_reward.reward_func(queries, prompts, ["600", "400"])
    finally:
        if openrlhf_reward._system is not None:
            openrlhf_reward._system.close()
    assert answer["rewards"] == answer["scores"] == pytest.approx([0.5 * 0.6 + 0.5, 0.5 * 0.4])
    logs = answer["extra_logs"]
    assert logs["component/judge"] == pytest.approx([0.6, 0.4]) and logs["component/arithmetic"] == [1.0, 0.0]
    assert logs["judge_rule_fallback"] == [0.0, 0.0] and faulty.items_received == 2
