"""The recipes ship inside the package (issue 34, item 5).

A pip user had no recipe, yet every Ref2VA command and `serve` require `--recipe`. The recipes
now live in `prenoise/recipes/` (the repository's `recipes/` links there), go into the wheel,
are listed by `prenoise recipes` and named by `--recipe NAME` from any directory.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from cli_refusals import refused
from prenoise.cli.commands import main
from prenoise.ref2va.catalog import RECIPES_DIR, describe, resolve_recipe, shipped
from source_tree import REPO, wheel_built_without_a_compiler

NAMES = ["ref2va-15s-1344x768", "ref2va-demo", "ref2va-image-1344x768"]


def test_the_package_ships_the_repository_s_recipes() -> None:
    assert list(shipped()) == NAMES
    assert (REPO / "src" / "prenoise" / "recipes").resolve() == RECIPES_DIR
    assert (REPO / "recipes").resolve() == RECIPES_DIR  # the documented paths still work
    assert describe(shipped()["ref2va-demo"]).startswith("Ref2VA demo: a 2 s 256x160 request")


def test_a_recipe_is_named_by_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    demo = RECIPES_DIR / "ref2va-demo.yaml"
    for value in ("ref2va-demo", "ref2va-demo.yaml", "demo"):
        assert resolve_recipe(value) == demo
    (tmp_path / "demo").write_text("name: mine\n")  # a file of that name wins
    assert resolve_recipe("demo") == Path("demo")
    assert resolve_recipe("nope") == Path("nope")
    assert resolve_recipe("dir/demo") == Path("dir/demo")  # a path is never a name


def test_prenoise_recipes_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["recipes"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert name in out
    assert f"files: {RECIPES_DIR}" in " ".join(out.split())


def test_an_unknown_recipe_names_the_shipped_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert refused(capsys, ["generate", "--recipe", "nope"]) == (
        "error: nope: cannot read recipe (No such file or directory); the shipped recipes are "
        "ref2va-15s-1344x768, ref2va-demo, ref2va-image-1344x768 (prenoise recipes lists them)"
    )


@pytest.mark.slow
def test_verify_runs_a_shipped_recipe_by_name_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["verify", "--recipe", "demo", "--steps", "1", "--duration", "0.5"]) == 0
    assert "bitwise equal: 9/9 fields" in capsys.readouterr().out
    assert (tmp_path / "outputs" / "ref2va-demo" / "reference.mp4").is_file()


@pytest.mark.slow
def test_the_wheel_carries_the_recipes(tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("setuptools")
    # CC=/bin/false: the kernel is optional; this is about the data (the same build as
    # test_install's wheel without the kernel, built once: source_tree)
    wheels, build = wheel_built_without_a_compiler(tmp_path_factory.mktemp("no-compiler"))
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("prenoise-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(n for n in names if n.startswith("prenoise/recipes/")) == [
        f"prenoise/recipes/{name}.yaml" for name in NAMES
    ]
