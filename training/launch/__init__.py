"""The Python side of the cookbooks' run_*.sh launchers: compose the final config, check it, snapshot it, run it.

recipe.py is the contract between the core (core.py) and each recipe; registry.py lists the recipes.
"""
