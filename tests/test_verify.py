from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

from prenoise.cli import main
from prenoise.verify import compare, tensor_sha256


@dataclass
class Inputs:
    video: torch.Tensor
    extra: list[torch.Tensor]
    steps: int


def make() -> dict[str, object]:
    g = torch.Generator().manual_seed(0)
    return {
        "inputs": Inputs(torch.randn(4, 8, generator=g), [torch.randn(3, generator=g)], 50),
        "scale": 0.5,
        "note": None,
    }


def test_identical_structures_are_equal() -> None:
    report = compare(make(), make())
    assert report.equal
    assert set(report.fields) == {"inputs.video", "inputs.extra.0", "inputs.steps", "scale", "note"}
    assert report.summary() == "bitwise equal: 5/5 fields"
    json.loads(report.to_json())


@pytest.mark.parametrize(
    ("mutate", "kind"),
    [
        (lambda d: d["inputs"].video.view(-1)[5].add_(1e-7), "values"),
        (lambda d: setattr(d["inputs"], "video", d["inputs"].video.t().contiguous().t()), "stride"),
        (lambda d: setattr(d["inputs"], "video", d["inputs"].video.double()), "dtype"),
        (None, "device"),
        (lambda d: setattr(d["inputs"], "video", d["inputs"].video.reshape(8, 4)), "shape"),
        (lambda d: d.__setitem__("added", 1), "missing in a"),
        (
            lambda d: setattr(d["inputs"], "video", d["inputs"].video[:, :].requires_grad_()),
            "requires_grad",
        ),
        (lambda d: d.__setitem__("scale", 0.5000001), "values"),
    ],
)
def test_each_kind_of_difference_is_detected(mutate: object, kind: str) -> None:
    a, b = make(), make()
    if kind == "device":
        b["inputs"].video = torch.empty(4, 8, device="meta")  # type: ignore[attr-defined]
    else:
        mutate(b)  # type: ignore[operator]
    report = compare(a, b)
    assert not report.equal
    assert any(kind in f.differences for f in report.differing), report.summary()
    assert "DIFFERENT" in report.summary()


def test_bit_level_equality_nan_payload_and_negative_zero() -> None:
    a = torch.tensor([0.0, float("nan")])
    b = torch.tensor([-0.0, float("nan")])
    assert torch.equal(a[:1], b[:1])  # value-equal, but not bit-equal
    assert not compare(a, b).equal
    nan2 = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert not compare(a[1:], nan2).equal
    assert not compare(0.0, -0.0).equal


def test_storage_offset_is_compared() -> None:
    base = torch.arange(20.0)
    report = compare(base[2:6].clone(), base[2:6])
    assert report.differing[0].differences == ["storage_offset"]


def test_sha256_is_of_contiguous_logical_bytes() -> None:
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert tensor_sha256(t.t()) == tensor_sha256(t.t().contiguous())
    assert tensor_sha256(t) != tensor_sha256(t.t().contiguous())


def test_cli_compare_exit_codes(tmp_path: pytest.TempPathFactory) -> None:
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"  # type: ignore[operator]
    torch.save({"x": torch.ones(20)}, a)
    torch.save({"x": torch.ones(20)}, b)
    assert main(["compare", str(a), str(b)]) == 0
    torch.save({"x": torch.ones(20) * 2}, b)
    out = tmp_path / "r.json"  # type: ignore[operator]
    assert main(["compare", str(a), str(b), "--json", str(out)]) == 1
    assert json.loads(out.read_text())["equal"] is False
