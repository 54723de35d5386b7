"""The device a launch runs on, and what CPU mode (or a GPU without flash-attn) gives the processes it starts."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from training import cpu_compat
from training.launch.config import show
from training.launch.recipe import KeyNames, LaunchError

DEVICE_KEY = "trainer.device"
DEVICES = ("auto", "cuda", "cpu")
REPO_ROOT = Path(__file__).resolve().parents[2]
CPU_SITE_DIR = REPO_ROOT / "training" / "cpu_site"
SDPA_SITE_DIR = REPO_ROOT / "training" / "sdpa_site"
FLASH_ATTENTION_MISSING = "flash-attn is not installed here"


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


def flash_attention_installed() -> bool:
    """Whether flash-attn can be imported here (found without importing it, or torch)."""
    return importlib.util.find_spec("flash_attn") is not None


def removes_padding(device: str) -> bool:
    """Padding removal, and with it sequence parallelism, runs on flash-attn's variable-length kernels: on GPUs
    with flash-attn only. Elsewhere verl's trainers keep the padding and attend with PyTorch's SDPA."""
    return device != "cpu" and flash_attention_installed()


def device_environment(device: str) -> dict[str, str]:
    """CPU mode: every process started (torchrun ranks, Ray workers) imports training/cpu_site/sitecustomize.py,
    which applies verl's CPU fixes; JUDGE_CPU_DTYPE is fp32 unless the environment asks for bf16. A GPU without
    flash-attn: training/sdpa_site/sitecustomize.py, which turns the flash_attention_2 that verl's SFT trainer
    hard-codes into SDPA."""
    if device == "cpu":
        site, extra = CPU_SITE_DIR, {cpu_compat.CPU_DTYPE_ENV: training_dtype(device)}
    elif not flash_attention_installed():
        site, extra = SDPA_SITE_DIR, {}
    else:
        return {}
    path = [str(site), str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(path), **extra}


def training_dtype(device: str) -> str:
    """bf16 on GPUs; in CPU mode JUDGE_CPU_DTYPE (fp32 unless asked otherwise)."""
    if device != "cpu":
        return "bf16"
    try:
        return cpu_compat.cpu_dtype()
    except ValueError as err:
        raise LaunchError(str(err)) from err
