"""Imported by Python at start-up when this folder is on PYTHONPATH: the launchers put it there in CPU
mode only, so that every process they start (torchrun ranks, Ray workers) gets verl's CPU fixes."""

from training import cpu_compat

cpu_compat.install()
