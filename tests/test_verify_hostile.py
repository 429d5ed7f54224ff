"""`compare` against inputs built to make it say "equal" when they differ (issue #21)."""

from __future__ import annotations

import io
import os
import pathlib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from prenoise.cli.commands import main
from prenoise.verify import UncomparableError, compare


def _f32(bits: int) -> torch.Tensor:
    return torch.tensor([bits], dtype=torch.int32).view(torch.float32)


def _coo(indices: list[int], values: list[float] | torch.Tensor, size: int = 3) -> torch.Tensor:
    vals = values if isinstance(values, torch.Tensor) else torch.tensor(values)
    return torch.sparse_coo_tensor(torch.tensor([indices]), vals, (size,), check_invariants=False)


def _csr(values: list[float]) -> torch.Tensor:
    return torch.sparse_csr_tensor(
        torch.tensor([0, 1]), torch.tensor([0]), torch.tensor(values), (1, 2)
    )


QUIET_NAN, SIGNALLING_NAN = _f32(0x7FC00001), _f32(0x7F800001)  # to_dense quiets it

# (a, b, the kinds of difference): each pair is equal through to_dense(), yet differs.
SPARSE_PAIRS: dict[str, tuple[torch.Tensor, torch.Tensor, list[str]]] = {
    "-0.0 vs +0.0": (_coo([1], [-0.0]), _coo([1], [0.0]), ["values"]),
    "signalling vs quiet NaN": (_coo([1], SIGNALLING_NAN), _coo([1], QUIET_NAN), ["values"]),
    "duplicates [1, 2] vs [3]": (
        _coo([0, 0], [1.0, 2.0]),
        _coo([0], [3.0]),
        ["indices", "values", "coalesced"],
    ),
    "explicit -0.0 vs no entry": (
        _coo([1], [-0.0]),
        _coo([], []),
        ["indices", "values"],
    ),
    "coalesced flag": (
        _coo([0, 2], [1.0, 2.0]),
        _coo([0, 2], [1.0, 2.0]).coalesce(),
        ["coalesced"],
    ),
    "CSR -0.0 vs +0.0": (_csr([-0.0]), _csr([0.0]), ["values"]),
}


@pytest.mark.parametrize("case", list(SPARSE_PAIRS))
def test_sparse_tensors_that_differ_in_storage_differ(case: str) -> None:
    a, b, kinds = SPARSE_PAIRS[case]
    assert torch.equal(a.to_dense().view(torch.int32), b.to_dense().view(torch.int32))
    report = compare({"s": a}, {"s": b})
    assert report.fields["s"].differences == kinds
    assert compare({"s": a}, {"s": a.clone()}).equal


def test_sparse_layouts_must_match() -> None:
    dense = torch.tensor([[0.0, 1.0]])
    report = compare(dense.to_sparse(), dense.to_sparse_csr())
    assert "layout" in report.fields["<root>"].differences


class LyingInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


class LyingStr(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class LyingTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.equal:
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize(("a", "b"), [(LyingInt(1), LyingInt(2)), (LyingStr("a"), LyingStr("b"))])
def test_subclasses_of_plain_values_are_refused(a: Any, b: Any) -> None:
    assert a == b
    with pytest.raises(UncomparableError, match="a subclass of"):
        compare({"x": a}, {"x": b})
    with pytest.raises(UncomparableError, match="a subclass of"):
        compare({a: 0}, {b: 0})


def test_a_tensor_subclass_cannot_answer_for_its_values() -> None:
    a = torch.zeros(2).as_subclass(LyingTensor)
    b = torch.ones(2).as_subclass(LyingTensor)
    assert torch.equal(a, b)
    assert compare(a, b).fields["<root>"].differences == ["values"]
    assert compare(a, torch.zeros(2).as_subclass(LyingTensor)).equal


def test_a_torch_dispatch_subclass_is_refused() -> None:
    class Dispatching(torch.Tensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    t = torch.zeros(2).as_subclass(Dispatching)
    with pytest.raises(UncomparableError, match=r"^x: tensor subclass .*Dispatching defines"):
        compare({"x": t}, {"x": t})


def test_tensor_python_attributes_are_refused() -> None:
    t = torch.zeros(2)
    t.note = "hidden"  # type: ignore[attr-defined]
    with pytest.raises(UncomparableError, match=r"^x: tensor carries Python attributes \(note\)$"):
        compare({"x": t}, {"x": torch.zeros(2)})


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (pathlib.PureWindowsPath("C:/A"), pathlib.PureWindowsPath("c:/a")),
        (pathlib.PurePosixPath("/a"), pathlib.PurePosixPath("//a")),
        (pathlib.PurePosixPath("a/b"), pathlib.PureWindowsPath("a/b")),
    ],
)
def test_paths_compare_on_exact_class_and_string(a: Any, b: Any) -> None:
    assert not compare({"p": a}, {"p": b}).equal
    assert not compare({a: 0}, {b: 0}).equal
    assert compare({"p": a}, {"p": type(a)(str(a))}).equal


def test_normalised_paths_are_one_value() -> None:
    # pathlib normalises at construction and pickles only the result: nothing else to compare.
    assert str(pathlib.PurePosixPath("a//b")) == "a/b"
    assert compare(pathlib.PurePosixPath("a//b"), pathlib.PurePosixPath("a/b")).equal


def _param(grad: torch.Tensor | None) -> torch.nn.Parameter:
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = grad
    return p


def test_a_parameters_grad_is_compared() -> None:
    report = compare(_param(torch.zeros(2)), _param(torch.tensor([0.0, -0.0])))
    assert {k: f.differences for k, f in report.fields.items()} == {
        "<root>": [],
        "grad": ["values"],
    }
    assert compare({"p": _param(None)}, {"p": _param(torch.zeros(2))}).fields[
        "p.grad"
    ].differences == ["missing in a"]
    assert compare(_param(torch.zeros(2)), _param(torch.zeros(2))).equal


def test_storage_aliasing_is_part_of_the_structure() -> None:
    t = torch.zeros(2)
    shared = {"x": t, "y": t}
    separate = {"x": torch.zeros(2), "y": torch.zeros(2)}
    report = compare(shared, separate)
    assert {k: f.differences for k, f in report.fields.items()} == {"x": [], "y": ["aliasing"]}
    assert compare(separate, shared).fields["y"].differences == ["aliasing"]
    u = torch.zeros(2)
    assert compare(shared, {"x": u, "y": u}).equal


# -- files: bounded before inflating, and never overwritten -------------------------------------


def _deflated(path: Path, value: Any) -> int:
    """`torch.save(value)` re-packed with DEFLATE; returns the declared uncompressed bytes."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    with zipfile.ZipFile(buffer) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        return sum(i.file_size for i in src.infolist())


def test_declared_sizes_are_read_without_inflating(tmp_path: Path) -> None:
    from prenoise.verify import declared_nbytes

    path = tmp_path / "zeros.pt"
    declared = _deflated(path, torch.zeros(1 << 20))
    assert declared > (1 << 22) > 20 * path.stat().st_size  # 4 MiB declared, compressed small
    assert declared_nbytes(path) == declared


def test_cli_refuses_inputs_over_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    _deflated(a, torch.zeros(1 << 20))
    _deflated(b, torch.zeros(1 << 20))
    assert main(["compare", str(a), str(b), "--memory-budget", "1MiB"]) == 2
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1
    assert "4.0 MiB" in out and "more than the memory budget of 1.0 MiB" in out
    assert main(["compare", str(a), str(b), "--memory-budget", "64MiB"]) == 0


def test_cli_refuses_an_output_that_is_an_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"x": 1}, a)
    torch.save({"x": 1}, b)
    before = a.read_bytes(), b.read_bytes()
    os.symlink(a, tmp_path / "link.pt")
    os.link(b, tmp_path / "hard.pt")
    for out in (a, tmp_path / "link.pt", tmp_path / "hard.pt", tmp_path / "sub" / ".." / "a.pt"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        assert main(["compare", str(a), str(b), "--json", str(out)]) == 2
        line = capsys.readouterr().out.strip()
        assert line.startswith(f"error: --json {out}: is the input ") and "\n" not in line
    assert (a.read_bytes(), b.read_bytes()) == before
