"""Recipes: the shipped YAML files, and one-line errors naming the key and the file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prenoise.ref2va import RecipeError, load_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
TINY_RECIPE = Path(__file__).with_name("tiny-recipe.yaml")


def test_seed_workload_recipe() -> None:
    r = load_recipe(RECIPES / "ref2va-15s-1344x768.yaml")
    geo = r.geometry()
    assert (r.seed, r.steps, r.shift_video, r.shift_audio) == (2101, 50, 12.0, 3.0)
    assert (geo.frames, geo.T, geo.width, geo.height, geo.h, geo.w) == (362, 107, 1344, 768, 48, 84)
    assert geo.audio_rows == 1206
    assert r.references[0].kind == "video" and r.tau_visual == 0.999 and r.tau_audio == 1.0


def test_demo_and_tiny_recipes() -> None:
    demo = load_recipe(RECIPES / "ref2va-demo.yaml")
    assert demo.geometry().frames == 56 and demo.size() == (256, 160)
    assert [ref.kind for ref in demo.references] == ["video", "image"]
    tiny = load_recipe(TINY_RECIPE)
    assert tiny.geometry().frames == 22 and tiny.output_seed(1) == 43


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


def test_unknown_key_names_key_and_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "prompt: x\nwidth: 64\nheight: 64\nbogus_key: 1\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    msg = str(info.value)
    assert "bogus_key" in msg and str(path) in msg and "\n" not in msg


def test_nested_unknown_key(tmp_path: Path) -> None:
    path = _write(tmp_path, "prompt: x\nshort_edge: 64\nmodel:\n  transformer:\n    depth: 3\n")
    with pytest.raises(RecipeError, match=re.escape("unknown key 'depth' in model.transformer")):
        load_recipe(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("prompt: x\nwidth: 64\nheight: 64\nduration: 1\nframes: 5\n", "not both"),
        ("prompt: x\nwidth: 64\n", "both width and height"),
        ("prompt: x\n", "short_edge"),
        ("prompt: x\nshort_edge: 64\nsteps: 0\n", "steps"),
        ("prompt: [unclosed\n", "not valid YAML"),
        ("- a list\n", "must be a mapping"),
    ],
)
def test_invalid_recipes(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(RecipeError, match=match):
        load_recipe(_write(tmp_path, text))


def test_missing_recipe(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=re.escape("nope.yaml")):
        load_recipe(tmp_path / "nope.yaml")


def test_overrides(tmp_path: Path) -> None:
    r = load_recipe(_write(tmp_path, "prompt: x\nshort_edge: 768\n"), seed=7, duration=1.0)
    assert r.seed == 7 and r.geometry().frames == 39 and r.size() == (1344, 768)
