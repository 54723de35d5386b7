"""The device a launch runs on, and what CPU mode gives the processes it starts."""

from __future__ import annotations

import os
from pathlib import Path

from training import cpu_compat
from training.launch.config import show
from training.launch.recipe import KeyNames, LaunchError

DEVICE_KEY = "trainer.device"
DEVICES = ("auto", "cuda", "cpu")
REPO_ROOT = Path(__file__).resolve().parents[2]
CPU_SITE_DIR = REPO_ROOT / "training" / "cpu_site"


def resolve_device(requested, key_names: KeyNames) -> str:
    """`trainer.device`: auto is cuda when an NVIDIA device node exists, else cpu (CPU mode)."""
    if requested not in DEVICES:
        raise LaunchError(f"{key_names(DEVICE_KEY)} = {show(requested)}: must be one of {', '.join(DEVICES)}")
    accelerator = cpu_compat.has_accelerator()
    if requested == "auto":
        return "cuda" if accelerator else "cpu"
    if requested == "cpu" and accelerator:
        raise LaunchError(f"{key_names(DEVICE_KEY)} = cpu: CPU mode is for machines without a GPU; use cuda here")
    return requested


def device_environment(device: str) -> dict[str, str]:
    """CPU mode: every process started (torchrun ranks, Ray workers) imports training/cpu_site/sitecustomize.py,
    which applies verl's CPU fixes; JUDGE_CPU_DTYPE is fp32 unless the environment asks for bf16."""
    if device != "cpu":
        return {}
    path = [str(CPU_SITE_DIR), str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(path), cpu_compat.CPU_DTYPE_ENV: training_dtype(device)}


def training_dtype(device: str) -> str:
    """bf16 on GPUs; in CPU mode JUDGE_CPU_DTYPE (fp32 unless asked otherwise)."""
    if device != "cpu":
        return "bf16"
    try:
        return cpu_compat.cpu_dtype()
    except ValueError as err:
        raise LaunchError(str(err)) from err
