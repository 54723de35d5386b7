"""The packages import one way, and the judge client installs and runs without the training and serving stack.

Floors, lowest first; a floor imports only the floors below it (LAYERS is the one table of what may import what):

    judge_core.protocol      stdlib only: judge templates and parsers, the wire format, judge.json
    judge_core               the shared base: settings, the rule scorer, the GRPO rewards
    judge_rewards            the reward client (adapter, HTTP client, breaker, health, trainer hooks)
    judge_models             the model code training and serving share (torch, transformers)
    data_prep                on judge_core
    serving                  the HTTP server, on judge_models and judge_core
    training                 on judge_models, judge_rewards and judge_core; never on serving
    evaluation               on serving, judge_models, judge_rewards and judge_core

Imports are read from the source (every `import` statement, also those inside functions); modules imported
by a computed name (importlib.import_module) are not seen.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[1]
PROTOCOL = "judge_core.protocol"
CORE = "judge_core"
CLIENT = "judge_rewards"
MODELS = "judge_models"
STDLIB_ONLY = None


class Layer(NamedTuple):
    may_import: frozenset[str]  # the project's layers it may import besides itself
    extras: tuple[str, ...] | None  # the pyproject extras that, with the base dependencies, install it
    optional_extras: tuple[str, ...] = ()  # extras of optional features


BASE = frozenset({PROTOCOL, CORE})
LAYERS = {
    PROTOCOL: Layer(frozenset(), STDLIB_ONLY),
    CORE: Layer(frozenset({PROTOCOL}), ()),
    CLIENT: Layer(BASE, ()),
    MODELS: Layer(BASE, ("serve",), optional_extras=("gpu",)),  # flash-attn
    "data_prep": Layer(BASE, ("train",)),
    "serving": Layer(BASE | {MODELS}, ("serve",), optional_extras=("gpu",)),  # gpu: vLLM backend
    "training": Layer(BASE | {CLIENT, MODELS}, ("train",), optional_extras=("gpu",)),  # flash-attn
    "evaluation": Layer(BASE | {CLIENT, MODELS, "serving"}, ("eval",), optional_extras=("gpu",)),  # vLLM sampling
}
NOT_PRODUCTS = ("tests", "benchmarks")  # first-party code that no product package may import
FIRST_PARTY = {name.partition(".")[0] for name in LAYERS} | set(NOT_PRODUCTS)

# What an RL trainer's environment need not have for the client (distribution and module names alike).
CLIENT_NEEDS_NONE_OF = ("torch", "verl", "transformers", "numpy", "fastapi", "ray", "pandas", "pyarrow")


def layer_of(module: str) -> str:
    """The layer (or non-product package) a first-party module belongs to: the longest matching prefix."""
    owners = [name for name in (*LAYERS, *NOT_PRODUCTS) if module == name or module.startswith(name + ".")]
    return max(owners, key=len)


def product_modules() -> Iterator[tuple[str, Path]]:
    """(dotted module name, path) of every module of the product packages."""
    for top in sorted({name.partition(".")[0] for name in LAYERS}):
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports_of(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of each import statement; `from X import y` counts as importing X."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            yield node.lineno, importlib.util.resolve_name("." * node.level + name, package) if node.level else name


def first_party_imports() -> Iterator[tuple[str, str, str, str]]:
    """(where, layer, imported module, its layer) of each import of the project's own code by a product package."""
    for module, path in product_modules():
        for line, imported in imports_of(module, path):
            if imported.partition(".")[0] in FIRST_PARTY:
                yield f"{path.relative_to(REPO_ROOT)}:{line}", layer_of(module), imported, layer_of(imported)


def third_party_imports(layer: str) -> Iterator[tuple[str, str]]:
    """(where, top-level module) of each import of a non-stdlib, non-project module by the layer's modules."""
    for module, path in product_modules():
        if layer_of(module) != layer:
            continue
        for line, imported in imports_of(module, path):
            top = imported.partition(".")[0]
            if top not in FIRST_PARTY and top not in sys.stdlib_module_names:
                yield f"{path.relative_to(REPO_ROOT)}:{line}", top


def declared_distributions(extras: Iterable[str]) -> set[str]:
    """Canonical names of the base dependencies and those of `extras` in pyproject.toml, following the
    project's references to its own extras (`judge-cookbook[serve]`)."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    pending = list(project["dependencies"])
    for extra in extras:
        pending.extend(project["optional-dependencies"][extra])
    names = set()
    while pending:
        requirement = Requirement(pending.pop())
        if canonicalize_name(requirement.name) == canonicalize_name(project["name"]):
            for extra in requirement.extras:
                pending.extend(project["optional-dependencies"][extra])
        else:
            names.add(canonicalize_name(requirement.name))
    return names


def installed_closure(requirements: Iterable[str]) -> set[str]:
    """Canonical names of everything installing `requirements` brings, read from the installed metadata."""
    found: dict[str, set[str]] = {}
    pending = [Requirement(text) for text in requirements]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in found and requirement.extras <= found[name]:
            continue
        found.setdefault(name, set()).update(requirement.extras)
        for text in importlib.metadata.requires(name) or []:
            dependency = Requirement(text)
            wanted = ("", *requirement.extras)
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": extra}) for extra in wanted):
                pending.append(dependency)
    return set(found)


def test_every_package_imports_only_the_layers_below_it():
    violations = [
        f"{where} ({layer}) imports {imported} ({target})"
        for where, layer, imported, target in first_party_imports()
        if target != layer and target not in LAYERS[layer].may_import
    ]
    assert not violations, "imports against the layering (see LAYERS):\n" + "\n".join(violations)


def test_the_floors_are_ordered_and_training_never_imports_serving():
    """LAYERS lists each floor after every floor it may import (so no circle between floors), and the model
    code training needs lives below serving, not in it."""
    order = list(LAYERS)
    assert [
        name for name in order if any(order.index(below) > order.index(name) for below in LAYERS[name].may_import)
    ] == []
    assert "serving" not in LAYERS["training"].may_import


def module_graph() -> dict[str, set[str]]:
    """Each product module's first-party imports, as modules: `from package import name` counts as importing
    package.name where that is a module (a package's submodule), else the package."""
    modules = dict(product_modules())
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = (
                    importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    if node.level
                    else node.module
                )
                submodules = {f"{base}.{alias.name}" for alias in node.names} & modules.keys()
                imported |= submodules or {base}
        graph[module] = {name for name in imported if name in modules and name != module}
    return graph


def test_no_module_imports_itself_through_others():
    graph, cycles = module_graph(), []
    for start in graph:
        pending, seen = [(start, (start,))], set()
        while pending:
            module, trail = pending.pop()
            for imported in graph[module]:
                if imported == start:
                    cycles.append(" -> ".join((*trail, start)))
                elif imported not in seen:
                    seen.add(imported)
                    pending.append((imported, (*trail, imported)))
    assert cycles == [], "import circles:\n" + "\n".join(sorted(set(cycles)))


def test_the_protocol_uses_the_standard_library_only():
    assert not list(third_party_imports(PROTOCOL))


@pytest.mark.parametrize("layer", [name for name, layer in LAYERS.items() if layer.extras is not STDLIB_ONLY])
def test_each_layer_declares_the_distributions_it_imports(layer):
    """A module's distribution comes from the installed metadata (a module not installed here, such as vllm,
    is taken to be its own distribution). Above the client, torch is left to the user on purpose
    (pyproject.toml says why); the client must not import it at all."""
    distributions = importlib.metadata.packages_distributions()
    extras = (*LAYERS[layer].extras, *LAYERS[layer].optional_extras)
    declared = declared_distributions(extras) | ({"torch"} if extras else set())
    undeclared = [
        f"{where} imports {top} ({', '.join(distributions.get(top, [top]))})"
        for where, top in third_party_imports(layer)
        if not declared & {canonicalize_name(name) for name in distributions.get(top, [top])}
    ]
    sources = " + ".join(("base", *extras))
    assert not undeclared, f"not declared in pyproject.toml ({sources}):\n" + "\n".join(undeclared)


def test_each_layers_extras_install_the_layers_it_imports():
    """Installing a layer's extras installs what the layers it imports need (eval brings serve)."""
    edges = {(layer, target) for _, layer, _, target in first_party_imports() if target != layer and target in LAYERS}
    missing = []
    for layer, target in sorted(edges):
        if LAYERS[target].extras is STDLIB_ONLY:
            continue
        absent = declared_distributions(LAYERS[target].extras) - declared_distributions(LAYERS[layer].extras)
        if absent:
            missing.append(f"{layer} imports {target}, but its extras lack {sorted(absent)}")
    assert not missing, "extras that miss what an imported layer needs:\n" + "\n".join(missing)


def test_the_base_install_brings_no_training_or_serving_stack():
    """`pip install .` is the client: neither its dependencies nor what they pull in include the heavy stack."""
    base = declared_distributions(())
    assert not base & set(CLIENT_NEEDS_NONE_OF), "in the base dependencies"
    assert not installed_closure(sorted(base)) & set(CLIENT_NEEDS_NONE_OF), "pulled in by the base dependencies"


# Run in a fresh interpreter whose import system refuses the heavy stack, as if it were not installed.
CLIENT_WITHOUT_HEAVY_STACK = """
import importlib.abc, json, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in REFUSED:
            raise ImportError(f"{name} is not installed in the client's environment")
        return None

sys.meta_path.insert(0, NotInstalled())

from judge_rewards import JudgeRewardSystem
from judge_core import grpo_rewards
from judge_rewards import verl_reward
from judge_core.protocol import judge_api, judge_spec, templates
from tests.reward_adapter_servers import FaultyJudgeServer
from tests.support.servers import free_port

judge = FaultyJudgeServer()  # the standard library's HTTP server; each score is the reference answer / 1000
with JudgeRewardSystem({"judge_url": judge.url, "use_cache": False}) as rewards:
    from_judge = rewards.reward("What is 2 + 2?", "4", "250")
from_verl_hook = verl_reward.compute_score("math", "4", "500", {"question": "What is 2 + 2?"}, judge_url=judge.url)
judge.close()
with JudgeRewardSystem({"judge_url": f"http://127.0.0.1:{free_port()}", "max_retries": 0}) as rewards:
    from_rules = rewards.reward("What is 1/2?", "It is \\\\frac{1}{2}", "0.5", "MATH_EXPRESSIONS")
pointwise = grpo_rewards.compute_pointwise_score("judge", "<think>fine</think><score>3</score>", '{"score": 3}')
print(json.dumps({
    "judge": from_judge, "verl_hook": from_verl_hook, "rules": from_rules, "pointwise": pointwise,
    "loaded": sorted(name for name in sys.modules if name.partition(".")[0] in REFUSED),
}))
"""


def test_the_client_works_without_torch_verl_transformers_or_the_server_stack():
    script = f"REFUSED = {set(CLIENT_NEEDS_NONE_OF)!r}\n{CLIENT_WITHOUT_HEAVY_STACK}"
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads(run.stdout.splitlines()[-1])
    assert (results["judge"]["source"], results["judge"]["reward"]) == ("judge", 0.25)
    assert (results["verl_hook"]["source"], results["verl_hook"]["score"]) == ("judge", 0.5)
    assert (results["rules"]["source"], results["rules"]["reward"]) == ("rule_fallback", 1.0)
    assert results["pointwise"]["score"] == 1.0
    assert results["loaded"] == []
