"""The recipes `python -m training.launch RECIPE ...` knows, by the name their run_*.sh passes."""

from __future__ import annotations

from training.launch.grpo import GRPO_RECIPES
from training.launch.recipe import Recipe
from training.launch.sft_recipes import AttributeRecipe, BradleyTerryRecipe, SftRecipe

RECIPES: dict[str, Recipe] = {
    recipe.name: recipe for recipe in (SftRecipe(), BradleyTerryRecipe(), AttributeRecipe(), *GRPO_RECIPES)
}
