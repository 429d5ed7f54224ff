"""scripts/mutation.py fails when the mutation check did not pass (mutmut itself is faked)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "mutation.py"
KILLED = "    prenoise.preparation.draws.x_chunk_bounds__mutmut_1: killed\n"


@pytest.fixture
def mutation() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_script_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


Fake = Callable[..., subprocess.CompletedProcess[str]]


def fake_mutmut(run_code: int = 0, results: str = KILLED) -> tuple[list[list[str]], Fake]:
    calls: list[list[str]] = []

    def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(args[1:])
        if args[1] == "run":
            return subprocess.CompletedProcess(args, run_code)
        return subprocess.CompletedProcess(args, 0, stdout=results)

    return calls, run


def install(
    mutation: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    fake: Fake | None,
    explained: str = "",
) -> Path:
    """Point the script at `tmp_path`: a fake mutmut (None: not installed), no tree copying."""
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    monkeypatch.setattr(mutation, "EXPLAINED", tmp_path / "explained.txt")
    (tmp_path / "explained.txt").write_text(explained)
    tree = tmp_path / "tree"
    tree.mkdir()
    monkeypatch.setattr(mutation, "_prepare", lambda module: tree)
    if fake is not None:
        (tmp_path / ".venv" / "bin").mkdir(parents=True)
        (tmp_path / ".venv" / "bin" / "mutmut").write_text("")
        monkeypatch.setattr(mutation.subprocess, "run", fake)
    return tree


@pytest.mark.parametrize(
    ("code", "reason"),
    [(1, "exit 1"), (137, "exit 137, killed by signal 9"), (-9, "exit -9, killed by signal 9")],
)
def test_a_failed_mutmut_run_fails_the_check(
    mutation: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    code: int,
    reason: str,
) -> None:
    calls, fake = fake_mutmut(run_code=code)
    tree = install(mutation, monkeypatch, tmp_path, fake)
    assert mutation.main(["draws"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"FAIL draws: `mutmut run` failed ({reason}); see {tree}"
    assert err[1].startswith("mutation check failed: 1 problem(s) in draws;")
    assert calls == [["run", "--max-children", "2"]]  # its stale results are never read


def test_an_unexplained_survivor_fails_and_is_named_by_module(
    mutation: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = (
        KILLED
        + "    prenoise.preparation.draws.x_chunk_bounds__mutmut_3: survived\n"
        + "    prenoise.preparation.draws.xǁDrawǁ__post_init____mutmut_38: survived\n"
        + "    prenoise.preparation.draws.x_run_draw__mutmut_7: no tests\n"
        + "    prenoise.preparation.draws.x_run_draw__mutmut_8: timeout\n"
    )
    explained = (
        "# comment\n\n"
        "draws prenoise.preparation.draws.x_chunk_bounds__mutmut_3 "
        "1 is not a multiple of 16 either\n"
        "kernel prenoise.preparation.draws.x_run_draw__mutmut_7 explained for another module only\n"
    )
    _, fake = fake_mutmut(results=results)
    tree = install(mutation, monkeypatch, tmp_path, fake, explained)
    assert mutation.main(["draws"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [
        "FAIL draws: no tests and not explained: prenoise.preparation.draws.x_run_draw__mutmut_7",
        "FAIL draws: survived and not explained: "
        "prenoise.preparation.draws.xǁDrawǁ__post_init____mutmut_38",
    ]
    assert err[2].startswith("mutation check failed: 2 problem(s) in draws; kill each survivor")
    assert (tree / "results.txt").read_text() == results


def test_every_survivor_explained_passes(
    mutation: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    results = KILLED + "    prenoise.preparation.draws.x_chunk_bounds__mutmut_3: survived\n"
    explained = (
        "draws prenoise.preparation.draws.x_chunk_bounds__mutmut_3 equivalent: <= 1 is <= 0 here\n"
    )
    _, fake = fake_mutmut(results=results)
    install(mutation, monkeypatch, tmp_path, fake, explained)
    assert mutation.main(["draws"]) == 0


def test_empty_results_fail_the_check(
    mutation: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, fake = fake_mutmut(results="")
    install(mutation, monkeypatch, tmp_path, fake)
    assert mutation.main(["executor"]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        "FAIL executor: mutmut listed no mutants; nothing was checked"
    )


def test_a_missing_mutmut_is_one_line_and_exit_2(
    mutation: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    install(mutation, monkeypatch, tmp_path, None)
    assert mutation.main(["draws"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (
        f"error: mutmut not found at {tmp_path}/.venv/bin/mutmut; install it (.venv/bin/python "
        "-m pip install mutmut==3.8.1, as `make mutation` does)\n"
    )


def test_an_explanation_without_a_reason_is_refused(mutation: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "explained.txt"
    path.write_text("draws prenoise.preparation.draws.x_chunk_bounds__mutmut_3\n")
    with pytest.raises(ValueError, match=r"^explained.txt:1: expected `module mutant-name why`"):
        mutation.load_explained(path)


def test_the_committed_explanations_parse(mutation: ModuleType) -> None:
    explained = mutation.load_explained()
    assert set(explained) <= set(mutation.MODULES)


def test_every_mutated_file_and_test_pattern_exists(mutation: ModuleType) -> None:
    """A module whose files moved (verify.py became a package) must not silently mutate nothing."""
    repo = SCRIPT.parents[1]
    for name, module in mutation.MODULES.items():
        for path in module.files:
            assert (repo / path).is_file(), (name, path)
        for pattern in module.tests:
            assert list(repo.glob(pattern)), (name, pattern)
