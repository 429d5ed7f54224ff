"""A wheel of this tree installed as a dry run into the running venv: what pip would change.

Used by the plugin suites (vLLM-Omni, SGLang): installing `prenoise[<extra>]` into someone's
serving environment must add prenoise and move nothing already installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from source_tree import REPO, copy_package_source
from waits import READY_CEILING_S

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """`args` without PYTHONPATH (pip sees the venv as a user's shell would); must succeed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        args, capture_output=True, text=True, timeout=READY_CEILING_S, check=False, env=env
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of this tree, built once per test module (import the fixture to use it)."""
    pytest.importorskip("setuptools")
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def build_wheel(root: Path) -> Path:
    """The package as pip would get it: a wheel built from this tree (kernel included), with
    the venv's own setuptools (no build isolation: nothing is downloaded)."""
    source = copy_package_source(root / "source")
    run([*PIP, "wheel", "--no-build-isolation", "--no-deps", "-q", str(source), "-w", str(root)])
    (built,) = root.glob("prenoise-*.whl")
    return built


def freeze() -> list[str]:
    """`pip freeze --all` of the running venv."""
    return run([*PIP, "freeze", "--all"]).stdout.splitlines()


def dry_run_installs(requirement: str, report: Path) -> list[tuple[str, str]]:
    """(name, version) of everything `pip install --dry-run --no-index <requirement>` would
    install into the running venv."""
    run([*PIP, "install", "--dry-run", "--no-index", "--report", str(report), "-q", requirement])
    installs = json.loads(report.read_text())["install"]
    return [(item["metadata"]["name"], item["metadata"]["version"]) for item in installs]


def wheel_requirements(wheel: Path) -> tuple[str, list[str]]:
    """The wheel's METADATA text and its `Requires-Dist:` lines."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    return metadata, [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]


def assert_readme_line_adds_prenoise_alone(extra: str, wheel: Path, report: Path) -> None:
    """The README's `pip install "$PRENOISE[<extra>]"` line, run as a dry run with `wheel` in
    the running venv: pip would install prenoise (this tree's version) and nothing else. The
    report is the proof (what a real install would change); the freeze comparison only guards
    that the dry run itself installed nothing."""
    readme = (REPO / "README.md").read_text()
    assert f'pip install "$PRENOISE[{extra}]"' in readme  # PRENOISE: the clone (or a wheel)
    before = freeze()
    installs = dry_run_installs(f"prenoise[{extra}] @ {wheel.as_uri()}", report)
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert installs == [("prenoise", version)]
    assert freeze() == before
