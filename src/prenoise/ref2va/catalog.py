"""The recipes shipped inside the package (`prenoise/recipes/*.yaml`; the repository's `recipes/`
is a link to them), so a pip user has them too: `prenoise recipes` lists them, and `--recipe
NAME` (e.g. `--recipe ref2va-demo`, or just `demo`) names one wherever the command runs."""

from __future__ import annotations

from pathlib import Path

__all__ = ["RECIPES_DIR", "describe", "resolve_recipe", "shipped"]

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
"""Where the installed package keeps its recipes."""

_PREFIX = "ref2va-"


def shipped() -> dict[str, Path]:
    """`{name: path}` of the shipped recipes, sorted by name."""
    return {path.stem: path for path in sorted(RECIPES_DIR.glob("*.yaml"))}


def describe(path: Path) -> str:
    """The recipe's opening comment, joined into one line (what the recipe is)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def resolve_recipe(value: str | Path) -> Path:
    """`value` as a path when that file exists or it names a folder; otherwise the shipped
    recipe it names (`ref2va-demo`, `ref2va-demo.yaml` or `demo`); otherwise `value` unchanged,
    for the reader to refuse, naming the shipped ones."""
    path = Path(value)
    if path.exists() or len(path.parts) != 1:
        return path
    name = path.name.removesuffix(".yaml")
    catalog = shipped()
    for candidate in (name, _PREFIX + name):
        if candidate in catalog:
            return catalog[candidate]
    return path
