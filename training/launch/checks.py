"""Checks of config values, shared by the recipes: each failure names the key (and its knob) and the value,
`data.train_batch_size (TRAIN_BATCH_SIZE) = 7: ...`, whichever layer the value came from."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from training.launch.config import show
from training.launch.recipe import KeyNames, LaunchError

# The backends of verl's trainer.logger (verl.utils.tracking.Tracking.supported_backend).
VERL_LOGGERS = ("console", "tensorboard", "wandb", "mlflow", "swanlab", "vemlp_wandb", "clearml", "trackio", "file")


class Checker:
    """Checks of one final config; `key_names` turns a key into the name the user knows it by."""

    def __init__(self, config: DictConfig, key_names: KeyNames):
        self.config = config
        self.key_names = key_names

    def value(self, key: str):
        return OmegaConf.select(self.config, key)

    def fail(self, key: str, problem: str) -> None:
        raise LaunchError(f"{self.key_names(key)} = {show(self.value(key))}: {problem}")

    def integer(self, key: str, minimum: int) -> int:
        value = self.value(key)
        if not _is_integer(value) or value < minimum:
            self.fail(key, f"must be an integer >= {minimum}")
        return value

    def optional_integer(self, key: str, minimum: int) -> int | None:
        return None if self.value(key) is None else self.integer(key, minimum)

    def number(self, key: str, minimum: float = 0, maximum: float | None = None) -> float:
        value = self.value(key)
        if not _is_number(value) or value < minimum or (maximum is not None and value > maximum):
            bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            self.fail(key, f"must be a number {bounds}")
        return value

    def frequency(self, key: str) -> None:
        """Every N steps (N >= 1), or -1: never / only at the end."""
        value = self.value(key)
        if not (_is_integer(value) and (value == -1 or value >= 1)):
            self.fail(key, "must be -1 or an integer >= 1")

    def choice(self, key: str, choices: Iterable[str]) -> None:
        if self.value(key) not in choices:
            self.fail(key, f"must be one of: {', '.join(choices)}")

    def boolean(self, key: str) -> bool:
        value = self.value(key)
        if not isinstance(value, bool):
            self.fail(key, "must be true or false")
        return value

    def choice_list(self, key: str, choices: Iterable[str]) -> None:
        """A list (or one name) whose every item is one of `choices`."""
        value = self.value(key)
        items = list(value) if isinstance(value, ListConfig) else [value]
        if not items:
            self.fail(key, f"must list at least one of: {', '.join(choices)}")
        for item in items:
            if item not in choices:
                self.fail(key, f"{item!r} is not one of: {', '.join(choices)}")

    def nonempty(self, *keys: str) -> None:
        for key in keys:
            if self.value(key) in (None, ""):
                self.fail(key, "must not be empty")

    def existing_file(self, key: str) -> None:
        value = self.value(key)
        if not isinstance(value, str) or not Path(value).is_file():
            self.fail(key, "no such file")

    def model(self, key: str) -> None:
        """A local HF model folder (checked for a config.json), or a hub id (resolved by the trainer)."""
        value = self.value(key)
        if not isinstance(value, str) or not value:
            self.fail(key, "must be a model folder or a hub id")
        if value.startswith(("./", "../", "/")) and not (Path(value) / "config.json").is_file():
            self.fail(key, "not a model folder (no config.json)")

    def multiple_of(self, key: str, divisor: int, divisor_name: str) -> None:
        if self.value(key) % divisor:
            self.fail(key, f"must be a multiple of {divisor_name} = {divisor}")


def _is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
