"""`python -m training.launch RECIPE SCRIPT ...`: what every run_*.sh launcher runs (see training/launch/core.py)."""

import sys

from training.launch.core import main
from training.launch.registry import RECIPES

sys.exit(main(sys.argv[1:], RECIPES))
