"""Imported by Python at start-up when this folder is on PYTHONPATH: the launchers put it there on GPUs without
flash-attn, so that every process they start asks for PyTorch's SDPA where verl asks for flash_attention_2."""

from training import cpu_compat

cpu_compat.install_sdpa_fallback()
