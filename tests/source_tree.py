"""The package's source as pip sees it, copied out of the working tree (for wheel builds)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from waits import READY_CEILING_S

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


_BUILT_WITHOUT_A_COMPILER: dict[str, tuple[Path, subprocess.CompletedProcess[str]]] = {}


def wheel_built_without_a_compiler(root: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`CC=/bin/false pip wheel --no-build-isolation --no-deps -v` of this tree (the kernel is
    optional: the build succeeds without it), built once per test session under `root` (a
    session's temporary directory, made by the first caller) and shared by the tests that read
    it (test_install: the wheel without the kernel, test_shipped_recipes: its recipes): the
    wheel's folder (empty where the build failed) and pip's completed process, for each test to
    check as before. No network: no build isolation, no dependencies."""
    if "built" not in _BUILT_WITHOUT_A_COMPILER:
        source = copy_package_source(root / "source")
        wheels = root / "wheels"
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PRENOISE_DEBUG")}
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        wheel = ["wheel", "--no-build-isolation", "--no-deps", "-v", str(source), "-w", str(wheels)]
        build = subprocess.run(
            [*pip, *wheel],
            env={**env, "CC": "/bin/false"},
            capture_output=True,
            text=True,
            timeout=READY_CEILING_S,
            check=False,
        )
        _BUILT_WITHOUT_A_COMPILER["built"] = (wheels, build)
    return _BUILT_WITHOUT_A_COMPILER["built"]
