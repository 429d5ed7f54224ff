"""The diffusers code the integration was reviewed on: the digests, their releases, the extra.

A plan never needs to be right for the output to be right (the replay queue checks each draw),
but the overlap is only safe if the caller's generator is drawn by nothing but the planned draws
while they are prepared. What decides that is each planned class's `__call__` and the draw code
it reaches: `prepare_latents`, `retrieve_latents`, the VAE posteriors' `sample`, `randn_tensor`.
Their source digests live in the package (`prenoise.integrations.diffusers.reviewed`, and
`reviewed_modular` for the modular plans), each recorded per release; the integration plans a
class wherever the installed code has reviewed digests (`digests.py`), whatever the version
string says. Here: every key has exactly one reviewed digest on every release of `RELEASES`,
the installed code has one of them (modular plans other than MiniMax-H3 may be reviewed on
fewer releases, at least the newest; this venv: 0.42.1; `make pytest-diffusers-0.40`: 0.40.0;
0.41.0 and 0.42.0 passed once, with the release's wheel unpacked ahead of the main venv's
diffusers on `PYTHONPATH`, docs/diffusers.md, Versions), the package's digest equals this file's
independent one, and every planned class, per-step scheduler and modular plan is covered.

The extra: `diffusers>=0.40.0`, a lower bound only. `pip install --dry-run` of
`prenoise[diffusers]` into each venv resolves with nothing but the local prenoise to install
(`--no-index`: no other distribution could be installed, so the installed diffusers must satisfy
the extra), i.e. installing the extra moves no diffusers; test_diffusers_dev_release.py does the
same beside a newer (0.43.0.dev0) diffusers.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import tomllib
from packaging.specifiers import SpecifierSet
from packaging.version import Version

pytest.importorskip("diffusers")

import diffusers

from prenoise.guards.source_digests import definition
from prenoise.integrations.diffusers import (
    TESTED_DIFFUSERS_VERSIONS,
    digests,
    supported,
    supported_modular,
)
from prenoise.integrations.diffusers.raw_draws import windows
from prenoise.integrations.diffusers.reviewed import COMMON, RELEASES, REVIEWED, SHARED
from prenoise.integrations.diffusers.reviewed_modular import MODULAR_COMMON, MODULAR_REVIEWED
from prenoise.integrations.diffusers.step_noise import STEP_DRAWS

REPO = Path(__file__).resolve().parents[2]
ALL = ("0.40.0", "0.41.0", "0.42.0", "0.42.1")
H3_CLASS = "diffusers.modular_pipelines.minimax_h3.modular_pipeline.MiniMaxH3ModularPipeline"
MODULAR_PENDING: set[str] = set()  # modular plans whose relied-on code is not recorded


def _all_reviewed() -> dict[str, dict[str, tuple[str, ...]]]:
    table = {key: dict(seen) for key, seen in REVIEWED.items()}
    for plan in MODULAR_REVIEWED.values():
        for key, seen in plan.items():
            table.setdefault(key, {}).update(seen)
    return table


DRAW_CODE = _all_reviewed()


VERSION = diffusers.__version__


def code_digest(source: str, qualname: str) -> str:
    """Digest of the function `qualname` in `source`: docstring and return annotation dropped
    (this file's own implementation, to check the package's against)."""
    node: ast.AST = ast.parse(source)
    for part in qualname.split("."):
        node = next(
            n
            for n in node.body  # type: ignore[attr-defined]
            if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name == part
        )
    assert isinstance(node, ast.FunctionDef)
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        node.body = node.body[1:]
    node.returns = None
    return hashlib.sha256(ast.unparse(node).encode()).hexdigest()[:12]


def test_every_key_has_one_reviewed_digest_on_every_release() -> None:
    """Classic plans, `MODULAR_COMMON` and MiniMax-H3: one digest on each of the four releases.
    Another modular plan may be reviewed on fewer (at least the newest): elsewhere its code's
    digest does not match and it runs plain."""
    assert set(ALL) == TESTED_DIFFUSERS_VERSIONS == set(RELEASES)
    everywhere = {*REVIEWED, *MODULAR_COMMON, *MODULAR_REVIEWED[H3_CLASS]}
    for key, seen in DRAW_CODE.items():
        releases = [v for vs in seen.values() for v in vs]
        assert len(releases) == len(set(releases)) and set(releases) <= set(RELEASES), key
        if key in everywhere:
            assert sorted(releases) == sorted(TESTED_DIFFUSERS_VERSIONS), key
        assert RELEASES[-1] in releases, key
    for key, seen in REVIEWED.items():  # the modular tables agree with the classic one
        assert DRAW_CODE[key] == seen, key


@pytest.mark.parametrize("key", sorted(DRAW_CODE))
def test_the_installed_draw_code_is_the_reviewed_code(key: str) -> None:
    digest = digests.installed_digest(key)
    releases = DRAW_CODE[key].get(digest, ())
    assert releases, f"{key} on diffusers {VERSION} has digest {digest}, reviewed: {DRAW_CODE[key]}"
    if VERSION in TESTED_DIFFUSERS_VERSIONS:
        assert VERSION in releases, f"{key}: {digest} was reviewed on {releases}, not {VERSION}"
    module_name, qualname = key.split(":")
    source = inspect.getsource(importlib.import_module(module_name))
    node = definition(ast.parse(source), qualname)
    if isinstance(node, ast.FunctionDef):  # whole-class keys: only the package digests those
        assert code_digest(source, qualname) == digest, key


def test_the_digest_ignores_docs_and_formatting_but_not_code() -> None:
    base = 'def f(x):\n    """Doc."""\n    return x + 1\n'
    same = "def f(x) -> int:  # a comment\n    return (x\n            + 1)\n"
    other = "def f(x):\n    return x + 2\n"
    assert (
        digests.code_digest(base, "f") == digests.code_digest(same, "f") == code_digest(base, "f")
    )
    assert digests.code_digest(other, "f") != digests.code_digest(base, "f")
    cls = (
        'class C:\n    """Doc."""\n    def m(self) -> int:\n        """Doc."""\n        return 1\n'
    )
    bare = "class C:\n    def m(self):\n        return 1\n"
    assert digests.code_digest(cls, "C") == digests.code_digest(bare, "C")
    assert digests.code_digest(cls, "C.m") == digests.code_digest(bare, "C.m")
    with pytest.raises(digests.CodeUnavailable, match=r"C\.n is not defined"):
        digests.code_digest(cls, "C.n")


def test_every_planned_and_windowed_class_exists_and_is_covered_here() -> None:
    for path in {*supported(), *windows()}:
        module_name, name = path.rsplit(".", 1)
        assert inspect.isclass(getattr(importlib.import_module(module_name), name)), path
        relied = digests.relied_on(path)
        assert f"{module_name}:{name}.__call__" in relied, f"{path}: no reviewed __call__"
        assert set(COMMON) <= set(relied) and set(relied) <= set(DRAW_CODE), path
    assert set(SHARED) <= set(supported())
    for path in supported_modular():
        module_name, name = path.rsplit(".", 1)
        assert inspect.isclass(getattr(importlib.import_module(module_name), name)), path
        assert set(MODULAR_COMMON) <= set(digests.modular_relied_on(path)) <= set(DRAW_CODE)
    unreviewed = {p.rsplit(".", 1)[1] for p in supported_modular() if p not in MODULAR_REVIEWED}
    assert unreviewed == MODULAR_PENDING, (
        "a modular plan without a table in reviewed_modular.MODULAR_REVIEWED (gated by "
        "MODULAR_COMMON only): add one (scripts/diffusers_digests.py prints its entries) and "
        "drop it from MODULAR_PENDING"
    )


def test_every_reviewed_function_is_relied_on() -> None:
    """No digest is recorded for nothing: each key gates a class, a scheduler or a modular plan."""
    used = {key for path in supported() for key in digests.relied_on(path)}
    used |= {key for path in supported_modular() for key in digests.modular_relied_on(path)}
    used |= {f"{path.rsplit('.', 1)[0]}:{path.rsplit('.', 1)[1]}.step" for path in STEP_DRAWS}
    assert set(DRAW_CODE) - used == set()


def test_every_class_is_planned_on_this_diffusers() -> None:
    for path in supported():
        module_name, name = path.rsplit(".", 1)
        cls = getattr(importlib.import_module(module_name), name)
        assert digests.class_code_problem(cls) is None, path
    for path in supported_modular():
        module_name, name = path.rsplit(".", 1)
        cls = getattr(importlib.import_module(module_name), name)
        assert digests.modular_code_problem(cls) is None, path


def test_every_per_step_scheduler_has_its_step_reviewed() -> None:
    for path in STEP_DRAWS:
        module_name, name = path.rsplit(".", 1)
        assert f"{module_name}:{name}.step" in DRAW_CODE, path
        cls = getattr(importlib.import_module(module_name), name)
        assert digests.step_code_problem(cls) is None, path


def test_the_extra_has_a_lower_bound_only() -> None:
    """Installing the extra never downgrades a newer diffusers: the digests decide support."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (requirement,) = extras["diffusers"]
    assert requirement.startswith("diffusers")
    spec = SpecifierSet(requirement.removeprefix("diffusers"))
    versions = sorted(Version(v) for v in TESTED_DIFFUSERS_VERSIONS)
    assert {str(s) for s in spec} == {f">={versions[0]}"}
    assert all(Version(v) in spec for v in ("0.42.1", "0.43.0.dev0", "0.50.0", "1.0.0"))


VENVS = {
    "this venv": Path(sys.executable),
    ".venv-vllm-omni": REPO / ".venv-vllm-omni" / "bin" / "python",
}


def installed_diffusers(python: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('diffusers'))"
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


@pytest.mark.parametrize("venv", sorted(VENVS))
def test_installing_the_extra_moves_no_installed_diffusers(venv: str, tmp_path: Path) -> None:
    python = VENVS[venv]
    if venv != "this venv" and python.parents[1].resolve() == Path(sys.prefix).resolve():
        pytest.skip(f"{venv} is this venv (checked once)")
    if not python.exists():
        pytest.skip(f"{venv} does not exist (make setup-vllm-omni)")
    before = installed_diffusers(python)
    assert before in TESTED_DIFFUSERS_VERSIONS, f"{venv} has diffusers {before}"
    report = tmp_path / "report.json"
    pip = [str(python), "-m", "pip", "install", "--dry-run", "--no-index", "--no-build-isolation"]
    options = ["--disable-pip-version-check", "-q", "--report", str(report)]
    done = subprocess.run(
        [*pip, *options, "-e", f"{REPO}[diffusers]", "torch==2.13.0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    install = json.loads(report.read_text())["install"]
    assert [item["metadata"]["name"] for item in install] == ["prenoise"]
    assert install[0]["requested"] and "diffusers" in install[0]["metadata"]["provides_extra"]
    assert installed_diffusers(python) == before


def _script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "diffusers_digests", REPO / "scripts" / "diffusers_digests.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_digest_script_prints_table_lines_from_wheels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """scripts/diffusers_digests.py reads each release's wheel (here two fake ones) and prints
    the lines to paste, with the package's digests; a key missing from a release exits 2."""
    sources = {"9.0.0": "def f(x):\n    return x\n", "9.1.0": "def f(x):\n    return x + 1\n"}
    for release, source in sources.items():
        with zipfile.ZipFile(tmp_path / f"diffusers-{release}-py3-none-any.whl", "w") as wheel:
            wheel.writestr("diffusers/mod.py", source)
    script = _script()
    argv = ["--wheels", str(tmp_path), "--release", "9.0.0", "--release", "9.1.0"]
    assert script.main([*argv, "diffusers.mod:f"]) == 0
    old, new = (digests.code_digest(s, "f") for s in sources.values())
    assert (
        capsys.readouterr().out
        == f'"diffusers.mod:f": {{"{old}": ("9.0.0",), "{new}": ("9.1.0",)}},\n'
    )
    assert script.main([*argv, "diffusers.mod:g"]) == 2
    assert "MISSING in 9.0.0, 9.1.0" in capsys.readouterr().out
