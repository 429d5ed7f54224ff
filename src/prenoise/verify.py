"""Bitwise verification of nested structures (the overlapped path vs the serial one).

`compare(a, b)` walks dicts, dataclasses, lists/tuples, tensors, numbers, strings and None and
reports, per field path, whether the two sides are identical: for tensors the values are
compared on their bit patterns (so NaN payloads and -0.0 count), together with shape, dtype,
device, layout, strides, storage offset and requires_grad; a sha256 of each side's contiguous
bytes is recorded. Floats are compared on their IEEE-754 bits too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["ComparisonReport", "FieldReport", "TensorInfo", "compare", "tensor_sha256"]

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class TensorInfo:
    """Metadata and digest of one tensor."""

    shape: list[int]
    dtype: str
    device: str
    layout: str
    stride: list[int]
    storage_offset: int
    requires_grad: bool
    sha256: str

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorInfo:
        strided = t.layout == torch.strided
        return cls(
            shape=list(t.shape),
            dtype=str(t.dtype),
            device=str(t.device),
            layout=str(t.layout),
            stride=list(t.stride()) if strided else [],
            storage_offset=int(t.storage_offset()) if strided else 0,
            requires_grad=t.requires_grad,
            sha256=tensor_sha256(t),
        )


@dataclass
class FieldReport:
    """The comparison of one field; `differences` names every kind of difference found."""

    path: str
    equal: bool
    differences: list[str] = field(default_factory=list)
    a: TensorInfo | str | None = None
    b: TensorInfo | str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"equal": self.equal, "differences": self.differences}
        for side in ("a", "b"):
            value = getattr(self, side)
            out[side] = dataclasses.asdict(value) if isinstance(value, TensorInfo) else value
        return out


@dataclass
class ComparisonReport:
    """Per-field results; `equal` is True only if every field is identical."""

    fields: dict[str, FieldReport]

    @property
    def equal(self) -> bool:
        return all(f.equal for f in self.fields.values())

    @property
    def differing(self) -> list[FieldReport]:
        return [f for f in self.fields.values() if not f.equal]

    def summary(self) -> str:
        """One line: how many fields are bitwise equal, and which differ and how."""
        n = len(self.fields)
        if self.equal:
            return f"bitwise equal: {n}/{n} fields"
        worst = "; ".join(f"{f.path}: {', '.join(f.differences)}" for f in self.differing[:5])
        more = f" (+{len(self.differing) - 5} more)" if len(self.differing) > 5 else ""
        return f"DIFFERENT: {len(self.differing)}/{n} fields differ — {worst}{more}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "summary": self.summary(),
            "fields": {p: f.to_dict() for p, f in self.fields.items()},
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)


def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 of the tensor's values as contiguous bytes in logical (row-major) order, on CPU.

    Meta tensors have no data: their digest is the empty string.
    """
    t = t.detach()
    if t.is_meta:
        return ""
    if t.layout != torch.strided:
        t = t.to_dense()
    t = t.cpu().contiguous()
    if t.is_complex():
        t = torch.view_as_real(t).contiguous()
    digest = hashlib.sha256()
    if t.numel():
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_complex():
        t = torch.view_as_real(t)
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(_INT_VIEW[t.element_size()])


def _compare_tensors(path: str, a: torch.Tensor, b: torch.Tensor) -> FieldReport:
    ia, ib = TensorInfo.of(a), TensorInfo.of(b)
    diffs = [
        name
        for name in ("shape", "dtype", "device", "layout", "stride", "storage_offset")
        if getattr(ia, name) != getattr(ib, name)
    ]
    if ia.requires_grad != ib.requires_grad:
        diffs.append("requires_grad")
    if a.is_meta or b.is_meta:
        pass  # no data to compare; the device difference (if any) is already reported
    elif ia.shape == ib.shape and ia.dtype == ib.dtype:
        if not torch.equal(_bits(a).cpu(), _bits(b).cpu()):
            diffs.append("values")
    elif ia.sha256 != ib.sha256:
        diffs.append("values")
    return FieldReport(path, not diffs, diffs, ia, ib)


def _scalar_key(x: Any) -> Any:
    if isinstance(x, float):
        return ("float", struct.pack("<d", x))
    if isinstance(x, complex):
        return ("complex", struct.pack("<dd", x.real, x.imag))
    return (type(x).__name__, x)


def _children(x: Any) -> Mapping[str, Any] | None:
    if isinstance(x, Mapping):
        return {str(k): v for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: getattr(x, f.name) for f in dataclasses.fields(x)}
    if isinstance(x, list | tuple):
        return {str(i): v for i, v in enumerate(x)}
    return None


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor{list(x.shape)} {x.dtype}"
    return f"{type(x).__name__}: {x!r}"[:200]


def _walk(path: str, a: Any, b: Any, out: dict[str, FieldReport]) -> None:
    label = path or "<root>"
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        out[label] = _compare_tensors(label, a, b)
        return
    ca, cb = _children(a), _children(b)
    if ca is not None and cb is not None and type(a) is type(b):
        for key in list(ca) + [k for k in cb if k not in ca]:
            child = f"{path}.{key}" if path else key
            if key not in cb:
                out[child] = FieldReport(child, False, ["missing in b"], _describe(ca[key]), None)
            elif key not in ca:
                out[child] = FieldReport(child, False, ["missing in a"], None, _describe(cb[key]))
            else:
                _walk(child, ca[key], cb[key], out)
        return
    if type(a) is not type(b):
        out[label] = FieldReport(label, False, ["type"], _describe(a), _describe(b))
    elif _scalar_key(a) != _scalar_key(b):
        out[label] = FieldReport(label, False, ["values"], _describe(a), _describe(b))
    else:
        out[label] = FieldReport(label, True, [], _describe(a), _describe(b))


def compare(a: Any, b: Any) -> ComparisonReport:
    """Compare two nested structures field by field; see the module docstring for what counts.

    Field paths join keys, dataclass field names and sequence indices with dots
    (`"conditions.0.noise"`). A key present on one side only is reported as a difference.
    """
    fields: dict[str, FieldReport] = {}
    _walk("", a, b, fields)
    return ComparisonReport(fields)
