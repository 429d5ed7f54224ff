"""The package's source as pip sees it, copied out of the working tree (for wheel builds)."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def copy_package_source(destination: Path) -> Path:
    """Copy what `pip wheel` needs (pyproject.toml, README.md, src/prenoise without build
    outputs: no `__pycache__`, no compiled kernel) to `destination`; returns it."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, destination / name)
    shutil.copytree(
        REPO / "src" / "prenoise",
        destination / "src" / "prenoise",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"),
    )
    return destination
