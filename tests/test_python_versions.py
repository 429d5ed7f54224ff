"""The Pythons `requires-python` admits besides the tested 3.11: what can be checked without torch.

prenoise runs (and its whole suite passes) on Python 3.11, the venvs' interpreter. Importing
prenoise needs torch (the package re-exports the core, which draws with torch), and torch wheels
for 3.10, 3.12 and 3.13 are multi-GB downloads, so on those the runtime is not tested. What is
checked on each one installed here (pyenv or PATH), in seconds: every Python source of the
package, the tests, scripts and benchmarks compiles with that interpreter (its grammar: no syntax
newer than it), and the C kernel's extension module compiles against its headers (`cc
-fsyntax-only`, the C API it uses exists there). An interpreter that is not installed skips,
saying so.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from waits import READY_CEILING_S

REPO = Path(__file__).resolve().parents[1]
OTHER_PYTHONS = ("3.10", "3.12", "3.13")
COMPILE_ALL = """
import pathlib, sys
failed = []
for root in sys.argv[1:]:
    for path in sorted(pathlib.Path(root).rglob("*.py")):
        try:
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
        except SyntaxError as error:
            failed.append(f"{path}:{error.lineno}: {error.msg}")
print(len(failed))
print("\\n".join(failed))
"""


def interpreter(version: str) -> str | None:
    """pyenv's newest X.Y, else `pythonX.Y` on PATH but not a pyenv shim (which answers "command
    not found" for a version that is not selected); None when neither exists."""
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"))
    if candidates:
        return candidates[-1]
    found = shutil.which(f"python{version}")
    return found if found and "/shims/" not in found else None


@pytest.fixture(params=OTHER_PYTHONS)
def python(request: pytest.FixtureRequest) -> str:
    found = interpreter(request.param)
    if found is None:
        pytest.skip(f"Python {request.param} is not installed here (pyenv or PATH)")
    return found


def test_every_source_compiles(python: str) -> None:
    roots = [str(REPO / d) for d in ("src/prenoise", "tests", "scripts", "benchmarks")]
    done = subprocess.run(
        [python, "-c", COMPILE_ALL, *roots],
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
    )
    assert done.returncode == 0, done.stderr
    count, _, failures = done.stdout.partition("\n")
    assert count == "0", failures


def test_the_c_kernel_compiles_against_its_headers(python: str) -> None:
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler (cc): the kernel is optional and is not built either")
    include = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert (Path(include) / "Python.h").is_file(), include
    done = subprocess.run(
        [
            compiler,
            "-fsyntax-only",
            "-Werror=implicit-function-declaration",
            "-O3",
            "-ffp-contract=off",
            "-pthread",
            f"-I{include}",
            str(REPO / "src/prenoise/noise/csrc/noise_kernel.c"),
        ],
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
    )
    assert done.returncode == 0, done.stderr
