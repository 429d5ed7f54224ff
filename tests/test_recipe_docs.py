"""docs/recipes.md documents every recipe key, from the model itself (issue 34, item 5).

Recipe keys (`short_edge`, `aspect`, `model.*`, `parallel.*`) appeared only in the repository's
YAML and in error messages; docs/distributed.md showed `host_shared_noise: true` at a level where
it is refused. The page's key table is now written from `Recipe` and checked current by
scripts/check_docs.py; its example loads.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from prenoise.ref2va import recipe_docs
from prenoise.ref2va.config import Recipe, RecipeError, load_recipe, recipe_from_dict
from prenoise.ref2va.recipe_docs import BEGIN, END, recipe_reference

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "recipes.md"


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        keys.append(key)
        nested = recipe_docs._nested_model(field.annotation)
        if nested is not None:
            listed = "list" in str(field.annotation)
            keys += _keys(nested, f"{key}[]." if listed else f"{key}.")
    return keys


def test_every_key_of_the_model_has_a_row_with_a_description() -> None:
    table = recipe_reference()
    rows = dict(re.findall(r"^\| `([^`]+?)(?:\[\])?` \| .*? \| .*? \| (.+) \|$", table, re.M))
    keys = _keys(Recipe)
    assert len(keys) > 60 and set(rows) == set(keys)
    assert all(len(text) > 5 for text in rows.values())
    for key in ("short_edge", "aspect", "parallel.host_shared_noise", "model.transformer.dim"):
        assert key in rows


def test_a_key_without_a_description_is_an_error() -> None:
    class Undocumented(BaseModel):
        documented: int = 1
        """What it sets."""
        bare: int = 2

    rows: list[str] = []
    with pytest.raises(ValueError, match=r"Undocumented\.bare has no description"):
        recipe_docs._rows(Undocumented, "", rows)
    assert rows[0] == "| `documented` | integer | `1` | What it sets. |"


def test_types_bounds_and_defaults_are_the_model_s() -> None:
    table = recipe_reference()
    assert "| `steps` | integer, ≥ 1 | `50` | denoising steps |" in table
    assert "| `prompt` | text | required | the text prompt |" in table
    assert "| `checkpoint` | path or null | none |" in table
    assert "| `limits.max_frame_pixels` | integer, ≥ 1 | 33,554,432 |" in table
    assert "| `orientation` | `landscape` \\| `portrait` | `landscape` |" in table


def test_the_page_holds_the_current_block() -> None:
    text = PAGE.read_text()
    assert recipe_reference() in text
    assert text.count(BEGIN) == text.count(END) == 1


def _check_docs() -> object:
    spec = importlib.util.spec_from_file_location("check_docs", REPO / "scripts" / "check_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_docs"] = module
    spec.loader.exec_module(module)
    return module


def test_check_docs_fails_on_a_stale_block(tmp_path: Path) -> None:
    check_docs = _check_docs()
    page = tmp_path / "docs" / "recipes.md"
    page.parent.mkdir()
    page.write_text("# Recipes\n\n" + recipe_reference() + "\n")
    generated = check_docs.real_generated()  # type: ignore[attr-defined]
    assert check_docs.check_generated(tmp_path, generated) == []  # type: ignore[attr-defined]
    page.write_text(page.read_text().replace("denoising steps", "steps"))
    assert check_docs.check_generated(tmp_path, generated) == [  # type: ignore[attr-defined]
        "docs/recipes.md:3: the generated block is stale: replace it with the output of "
        "`python -m prenoise.ref2va.recipe_docs`"
    ]
    page.write_text("# Recipes\n")
    problems = check_docs.check_generated(tmp_path, generated)  # type: ignore[attr-defined]
    assert len(problems) == 1 and "the generated block" in problems[0] and "missing" in problems[0]


def test_the_page_s_example_loads(tmp_path: Path) -> None:
    (example,) = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S)
    path = tmp_path / "my.yaml"
    path.write_text(example)
    recipe = load_recipe(path)
    assert (recipe.name, recipe.seed, recipe.steps, recipe.size()) == ("my-clip", 7, 8, (448, 256))


def test_parallel_keys_are_refused_at_the_top_level_and_taken_under_parallel() -> None:
    base = yaml.safe_load((REPO / "recipes" / "ref2va-demo.yaml").read_text())
    with pytest.raises(RecipeError, match="unknown key 'host_shared_noise'"):
        recipe_from_dict({**base, "host_shared_noise": True})
    recipe = recipe_from_dict({**base, "parallel": {"host_shared_noise": False}})
    assert recipe.parallel is not None and recipe.parallel.host_shared_noise is False
    text = (REPO / "docs" / "distributed.md").read_text()
    assert "`parallel: {host_shared_noise: true}`" in text
