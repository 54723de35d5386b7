"""Composing a recipe's final config from its layers (see training/launch/recipe.py for their order).

The recipe YAML is composed by Hydra (with verl's own config as a search path); every later layer is
either a YAML file merged by OmegaConf in struct mode (a key the recipe does not have is an error) or a
list of Hydra overrides, applied the way Hydra applies them to a trainer's command line. Each layer
records which keys it set, so the launch output can say where every value came from.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from training.launch.recipe import LaunchError

RECIPE_CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
LAUNCH_SECTION = "launch"  # launcher-only settings: not written into the trainer's config


def register_resolvers() -> None:
    """The interpolations the recipe YAMLs use beyond OmegaConf's own: `${basename:PATH}` (a run's name from its
    save folder). The trainers read a resolved snapshot; a trainer started on a recipe YAML directly calls this."""
    if not OmegaConf.has_resolver("basename"):
        OmegaConf.register_new_resolver("basename", lambda path: Path(str(path)).name)


@dataclass
class Layer:
    """Values from one source: a YAML mapping (merged) or Hydra overrides (applied)."""

    source: str  # in the launch output: "script default", "--config FILE", "environment", "command line", ...
    mapping: DictConfig | None = None
    overrides: list[Override] = field(default_factory=list)


def parse_overrides(source: str, arguments: list[str]) -> list[Override]:
    """`key=value` arguments in Hydra's override grammar (also `+key=value`, `++key=value`, `~key`)."""
    try:
        overrides = OverridesParser.create().parse_overrides(arguments)
    except HydraException as err:
        raise LaunchError(f"{source}: {err}") from err
    for override in overrides:
        if override.is_sweep_override():
            raise LaunchError(f"{source}: {override.input_line} is a sweep; a launch takes one value per key")
    return overrides


def load_config_file(path: str) -> Layer:
    """A --config FILE: a YAML mapping in config-key terms."""
    try:
        mapping = OmegaConf.load(path)
    except FileNotFoundError as err:
        raise LaunchError(f"--config {path}: no such file") from err
    except (OSError, OmegaConfBaseException, ValueError) as err:
        raise LaunchError(f"--config {path}: not a YAML file: {err}") from err
    if not isinstance(mapping, DictConfig):
        raise LaunchError(f"--config {path}: expected a YAML mapping of config keys, got a {type(mapping).__name__}")
    return Layer(f"--config {path}", mapping=mapping)


def compose_recipe_config(config_name: str) -> DictConfig:
    """training/configs/<config_name>.yaml composed by Hydra, in struct mode (a fresh copy each call)."""
    return copy.deepcopy(_composed_recipe_config(config_name))


@functools.cache
def _composed_recipe_config(config_name: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(RECIPE_CONFIG_DIR), version_base=None):
        try:
            return compose(config_name, overrides=[_searchpath_override(config_name)])
        except (HydraException, OmegaConfBaseException) as err:
            raise LaunchError(f"{RECIPE_CONFIG_DIR / config_name}.yaml: {err}") from err


def _searchpath_override(config_name: str) -> str:
    """The recipe YAML's `hydra.searchpath` with each pkg:// entry as the package's folder: Hydra would import the
    package (verl: ~10 s) only to find its folder, which the launcher locates without importing anything."""
    declared = OmegaConf.load(RECIPE_CONFIG_DIR / f"{config_name}.yaml").get("hydra", {}).get("searchpath", [])
    return f"hydra.searchpath=[{','.join(_as_file_path(entry) for entry in declared)}]"


def _as_file_path(entry: str) -> str:
    if not entry.startswith("pkg://"):
        return entry
    top, *rest = entry.removeprefix("pkg://").split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError(f"hydra.searchpath {entry}: package {top} is not installed")
    return "file://" + str(Path(spec.submodule_search_locations[0], *rest))


def apply_layer(config: DictConfig, layer: Layer) -> list[str]:
    """Apply `layer` to `config` in place; returns the dotted keys it set."""
    if layer.mapping is not None:
        try:
            config.merge_with(layer.mapping)
        except OmegaConfBaseException as err:
            raise LaunchError(f"{layer.source}: {_unknown_key_message(err)}") from err
        return leaf_keys(layer.mapping)
    for override in layer.overrides:
        try:
            # Hydra's own code for applying command-line overrides to a composed config (it has no public
            # function for it): the launch treats an override exactly as the trainer's command line would.
            ConfigLoaderImpl._apply_overrides_to_config([override], config)
        except (HydraException, OmegaConfBaseException) as err:
            raise LaunchError(f"{layer.source}: {override.input_line}: {err}") from err
    return [override.key_or_group for override in layer.overrides]


def _unknown_key_message(err: OmegaConfBaseException) -> str:
    key = getattr(err, "full_key", None)
    if key:
        return f"{key} is not a setting of this recipe ({type(err).__name__}: {str(err).splitlines()[0]})"
    return str(err)


def leaf_keys(mapping: DictConfig, prefix: str = "") -> list[str]:
    """The dotted keys of a mapping's values (a list is one value)."""
    keys = []
    for key, value in mapping.items_ex(resolve=False):
        dotted = f"{prefix}{key}"
        if isinstance(value, DictConfig) and len(value):
            keys.extend(leaf_keys(value, f"{dotted}."))
        else:
            keys.append(dotted)
    return keys


def trainer_config(config: DictConfig) -> DictConfig:
    """The config a trainer reads: resolved, without the launcher-only section."""
    container = OmegaConf.to_container(config, resolve=True)
    container.pop(LAUNCH_SECTION, None)
    return OmegaConf.create(container)


def show(value) -> str:
    """A config value as a user writes it in an override."""
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if value == "":
        return "''"
    if isinstance(value, list):
        return "[" + ",".join(show(item) for item in value) + "]"
    return str(value)
