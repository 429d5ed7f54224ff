"""Fixtures for the service tests: a tiny recipe, a media root, real uvicorn on 127.0.0.1.

Nothing here imports the `serve` extra at module level: the test modules skip themselves
(`pytest.importorskip`) when it is not installed, and the fixtures import it lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from prenoise.ref2va.cli_options import load_models
from prenoise.ref2va.config import Recipe, load_recipe
from prenoise.ref2va.media import make_synthetic_reference
from prenoise.ref2va.pipeline import Ref2VAPipeline

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"


@pytest.fixture(scope="session")
def media_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A media root holding `ref.mp4` (0.5 s 128x96 with audio)."""
    root = tmp_path_factory.mktemp("media")
    make_synthetic_reference(root / "ref.mp4", 0.5, 128, 96)
    return root


@pytest.fixture(scope="session")
def recipe_path(tmp_path_factory: pytest.TempPathFactory, media_root: Path) -> Path:
    """The tiny test recipe, its reference pointing at `media_root/ref.mp4`."""
    data = yaml.safe_load(TINY.read_text())
    data["references"] = [{"kind": "video", "path": str(media_root / "ref.mp4")}]
    data["output_dir"] = str(tmp_path_factory.mktemp("recipe-out"))
    path = tmp_path_factory.mktemp("recipe") / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="session")
def recipe(recipe_path: Path) -> Recipe:
    """The tiny recipe, loaded."""
    return load_recipe(recipe_path)


@pytest.fixture(scope="session")
def pipeline(recipe: Recipe) -> Ref2VAPipeline:
    """One model instance shared by every server of the session (read-only)."""
    return Ref2VAPipeline(load_models(recipe), device=recipe.device)


@pytest.fixture
def start_server(
    recipe: Recipe, pipeline: Ref2VAPipeline, media_root: Path, tmp_path: Path
) -> Iterator[Callable[..., Any]]:
    """Start servers with `ServeSettings` overrides; all are stopped at teardown."""
    from serve_helpers import ServerThread

    from prenoise.serve import ServeSettings, create_app

    started: list[ServerThread] = []

    def start(*, pipeline_: Ref2VAPipeline | None = None, **overrides: Any) -> ServerThread:
        defaults = {
            "recipe": recipe,
            "output_dir": tmp_path / f"out{len(started)}",
            "media_root": media_root,
        }
        settings = ServeSettings(**{**defaults, **overrides})
        server = ServerThread(create_app(settings, pipeline_ or pipeline)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def server(start_server: Callable[..., Any]) -> Any:
    """A default server (prepare-ahead 1, step limit raised for the cancel tests)."""
    from prenoise.serve import ServeLimits

    return start_server(limits=ServeLimits(max_steps=100_000))
