"""What `compare` returns: per-field reports, and the error for what it cannot compare."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import torch

from prenoise.verify.bits import UncomparableError, base_attribute, plain, tensor_sha256

__all__ = ["ComparisonReport", "FieldReport", "TensorInfo", "UncomparableError"]


@dataclass(frozen=True)
class TensorInfo:
    """Metadata and digest of one tensor (read as torch.Tensor defines it, see `tensors.plain`)."""

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
        p = plain(t)
        strided = p.layout == torch.strided
        return cls(
            shape=list(p.shape),
            dtype=str(p.dtype),
            device=str(p.device),
            layout=str(p.layout),
            stride=list(p.stride()) if strided else [],
            storage_offset=int(p.storage_offset()) if strided else 0,
            requires_grad=bool(base_attribute(t, "requires_grad")),
            sha256=tensor_sha256(p),
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
