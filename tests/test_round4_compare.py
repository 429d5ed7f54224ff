"""Hardening round 4 (issue 42), `prenoise compare`: bounded work, and the right reason.

Against the real CLI (`python -m prenoise compare`, a subprocess under an address-space limit
and a hang guard; no timing is asserted) wherever a regression could hang or eat memory; the
cases that cannot (a refused pickle, a missing package, two variables set, safetensors inputs
after one real run) call the CLI's `main` in this process, exit status and one line the same:

- HIGH 6: shared references (`x = [x, x]` saved n times: n objects, ~1.7 KB, 2^n labels) made
  the walk visit every label (the depth limit never applied); a zero-stride tensor
  (`torch.zeros(1).expand(N)`, 1.5 KB on disk) passed the memory check, which summed stored
  bytes, and was then copied whole. Now: what the structures expand to is counted once per shared
  object before the walk, and more than `MAX_FIELDS` labels is refused (the walk counts too); a
  tensor pair met again is not read again; the bytes each tensor pair's comparison copies (its
  logical size where it is not stored contiguously) are checked against the budget before the
  copy.
- MEDIUM: a pickle whose reduce imports or calls what weights-only loading does not allow is
  "refused as unsafe" naming it (was "truncated or corrupt"); safetensors files are read (were
  "not a readable torch.save file"), or refused in one line naming the `ref2va` extra when the
  `safetensors` package is missing; torch's two weights-only variables both set are named (every
  input was "corrupt").
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

HANG_GUARD_S = 180
ADDRESS_SPACE = 3 * 2**30
"""Enough for the CLI to compare small files; a 4 GiB copy cannot be made under it."""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "PRENOISE_DEBUG"}
    full.update(COLUMNS="400", OMP_WAIT_POLICY="PASSIVE", HF_HUB_OFFLINE="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "prenoise", "compare", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        preexec_fn=_limited,
        check=False,
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    out = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, out
    assert len(out.splitlines()) == 1, out
    assert out.startswith("error: ") and "internal error" not in out, out
    return out


def _refused_here(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cwd: Path, *args: str
) -> str:
    """`prenoise compare ARGS` through the CLI's `main` in this process, for the cases with no
    hang or memory to guard against: exit 2 and one `error: ...` line, as `_one_error_line`."""
    from cli_refusals import refused

    monkeypatch.chdir(cwd)
    monkeypatch.delenv("PRENOISE_DEBUG", raising=False)
    out = refused(capsys, ["compare", *args])
    assert out.startswith("error: ") and "internal error" not in out, out
    return out


def _chain(levels: int, leaf: Any = 1) -> list[Any]:
    x: list[Any] = [leaf]
    for _ in range(levels):
        x = [x, x]
    return x


# --- HIGH 6: shared references ---------------------------------------------------------------


def test_shared_references_are_refused_not_walked_for_ever(tmp_path: Path) -> None:
    path = tmp_path / "shared.pt"
    torch.save(_chain(40), path)
    assert path.stat().st_size < 4096  # 2^40 labels
    out = _one_error_line(run_cli("shared.pt", "shared.pt", cwd=tmp_path))
    assert "more than 1,000,000 fields to compare" in out


def test_the_count_visits_each_shared_object_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import prenoise.verify.containers as containers
    from prenoise.verify import MAX_FIELDS

    calls = 0
    counted = containers._counted_children

    def spy(x: Any) -> list[Any]:
        nonlocal calls
        calls += 1
        return counted(x)

    monkeypatch.setattr(containers, "_counted_children", spy)
    assert containers.expanded_size(_chain(60), MAX_FIELDS) == MAX_FIELDS + 1
    assert calls <= 2 * 61  # each of the 61 lists: children listed to push, then to sum
    assert (
        containers.expanded_size(_chain(10), MAX_FIELDS) == 2**11 + 2**10 - 1
    )  # lists, then leaves


def test_shared_references_within_the_budget_are_still_compared_label_by_label() -> None:
    from prenoise.verify import compare

    report = compare(_chain(10), _chain(10))
    assert report.equal and len(report.fields) == 2**10
    different = compare(_chain(10), _chain(10, leaf=2))
    assert not different.equal and len(different.differing) == 2**10


def test_a_tensor_shared_many_times_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import prenoise.verify as verify

    reads = 0
    real = verify.compare_tensors

    def spy(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(verify, "compare_tensors", spy)
    t = torch.zeros(1).expand(10_000)
    report = verify.compare({"x": [t] * 500}, {"x": [t] * 500})
    assert report.equal and len(report.fields) == 500 and reads == 1


# --- HIGH 6: what is materialised ------------------------------------------------------------


def test_a_zero_stride_tensor_is_counted_at_its_logical_size(tmp_path: Path) -> None:
    torch.save({"x": torch.zeros(1).expand(10**6)}, tmp_path / "e.pt")
    assert (tmp_path / "e.pt").stat().st_size < 4096  # stores one float, means 4 MB
    out = _one_error_line(run_cli("e.pt", "e.pt", "--memory-budget", "1MiB", cwd=tmp_path))
    assert "x: comparing tensor[1000000] torch.float32" in out
    assert "copied whole) needs 7.6 MiB, more than the memory budget of" in out


def test_a_zero_stride_tensor_over_the_memory_available_is_refused(tmp_path: Path) -> None:
    """No budget given: the memory available now (here the address-space limit) binds. The old
    check passed it (4 bytes stored) and the 4 GiB copy failed as "out of memory"."""
    torch.save({"x": torch.zeros(1).expand(2**30)}, tmp_path / "e.pt")
    out = _one_error_line(run_cli("e.pt", "e.pt", cwd=tmp_path))
    assert "x: comparing tensor[1073741824] torch.float32" in out
    assert "needs 8.0 GiB, more than" in out and "out of memory" not in out


def test_copies_are_checked_in_the_library_too() -> None:
    from prenoise.guards.budget import BudgetExceededError
    from prenoise.verify import compare
    from prenoise.verify.bits import copied_nbytes

    e = torch.zeros(1).expand(10**6)
    assert copied_nbytes(e) == 4 * 10**6
    assert copied_nbytes(torch.zeros(10**6)) == 0  # read in place
    assert copied_nbytes(torch.zeros(10, 10).t()) == 400
    with pytest.raises(BudgetExceededError, match="copied whole"):
        compare({"x": e}, {"x": e}, memory_budget=2**20)
    assert compare({"x": e}, {"x": e.contiguous()}, memory_budget=2**24).equal is False


# --- MEDIUM: the reason named ----------------------------------------------------------------


class _RunsAShell:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_as_unsafe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process: what the pickle would run, were it loaded, is a `touch` in tmp_path."""
    marker = tmp_path / "ran"
    torch.save({"x": _RunsAShell(str(marker))}, tmp_path / "evil.pt")
    torch.save({"x": 1}, tmp_path / "good.pt")
    out = _refused_here(monkeypatch, capsys, tmp_path, "good.pt", "evil.pt")
    assert out.startswith("error: evil.pt: refused as unsafe: it imports ")
    assert "system" in out and "corrupt" not in out
    assert not marker.exists()


def _safetensors(path: Path, tensors: dict[str, torch.Tensor], **metadata: str) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata or None)


def test_safetensors_files_are_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("safetensors")
    x = torch.arange(6.0).reshape(2, 3)
    _safetensors(tmp_path / "a.safetensors", {"x": x, "y": torch.ones(2)})
    _safetensors(tmp_path / "b.bin", {"x": x, "y": torch.ones(2)})  # found by its header
    _safetensors(tmp_path / "c.safetensors", {"x": x, "y": torch.ones(2)}, step="7")
    equal = run_cli("a.safetensors", "b.bin", cwd=tmp_path)
    assert equal.returncode == 0 and "bitwise equal: 2/2 fields" in equal.stdout
    # The rest in this process (the same `main`; small files, nothing to guard against): one
    # real CLI run above is the console script's path.
    from prenoise.cli.commands import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PRENOISE_DEBUG", raising=False)
    capsys.readouterr()
    assert main(["compare", "a.safetensors", "c.safetensors"]) == 1
    assert "__metadata__: missing in a" in " ".join(capsys.readouterr().out.split())
    torch.save({"x": x, "y": torch.ones(2)}, tmp_path / "a.pt")
    mixed = main(["compare", "a.pt", "a.safetensors"])
    assert mixed == 0, capsys.readouterr()


def test_safetensors_without_the_package_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("safetensors")
    _safetensors(tmp_path / "a.safetensors", {"x": torch.ones(2)})
    # None in sys.modules: importing it raises ModuleNotFoundError, as when it is not installed
    # (the reader imports it when it meets a safetensors file)
    monkeypatch.setitem(sys.modules, "safetensors", None)
    out = _refused_here(monkeypatch, capsys, tmp_path, "a.safetensors", "a.safetensors")
    assert "reading the safetensors file a.safetensors needs the 'ref2va' extra" in out
    assert "safetensors not installed" in out


def test_both_weights_only_variables_set_are_named_not_blamed_on_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.save({"x": 1}, tmp_path / "a.pt")
    # torch.load (and prenoise's check) read both variables at each call
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    out = _refused_here(monkeypatch, capsys, tmp_path, "a.pt", "a.pt")
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD and TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD are both set" in out
    assert "corrupt" not in out
