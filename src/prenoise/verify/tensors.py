"""Comparing two tensors field by field: metadata, then the bits each layout stores.

Tensors are read through `prenoise.verify.bits` (plain aliases, never the tensor's own class
code); a difference is reported per field (shape, dtype, device, layout, stride, offset,
requires_grad, values), with the first differing positions for values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from prenoise.guards.budget import require_fits
from prenoise.verify.bits import (
    UncomparableError,
    copied_nbytes,
    flat_bytes,
    grad_of,
    plain,
    same_bits,
    storage_parts,
    tensor_sha256,
)
from prenoise.verify.reports import FieldReport, TensorInfo

__all__ = ["StorageOwners", "compare_tensors", "grad_of", "plain", "storage_parts", "tensor_sha256"]

_META_FIELDS = ("shape", "dtype", "device", "layout", "stride", "storage_offset")


def _value_differences(
    pa: torch.Tensor, pb: torch.Tensor, ia: TensorInfo, ib: TensorInfo
) -> list[str]:
    if pa.is_meta or pb.is_meta:
        return []  # no data to compare; the device difference (if any) is already reported
    if pa.layout != pb.layout:
        return ["values"] if ia.sha256 != ib.sha256 else []
    if pa.layout == torch.strided:
        if ia.shape == ib.shape and ia.dtype == ib.dtype:
            equal = torch.equal(flat_bytes(pa), flat_bytes(pb))
        else:  # the bytes alone, for the report (the metadata already differs)
            equal = ia.sha256 == ib.sha256
        return [] if equal else ["values"]
    diffs = [
        name
        for (name, x), (_, y) in zip(storage_parts(pa), storage_parts(pb), strict=True)
        if not same_bits(x, y)
    ]
    if pa.layout == torch.sparse_coo and pa.is_coalesced() != pb.is_coalesced():
        diffs.append("coalesced")
    return diffs


COPY_FIX = "set a larger budget with --memory-budget SIZE (e.g. 16GiB) if the memory is there"


def require_copies_fit(path: str, pa: torch.Tensor, pb: torch.Tensor, budget: int | None) -> None:
    """Refuse (`BudgetExceededError`) two plain tensors whose comparison would copy more than
    `budget` bytes (None: the memory available now): their logical values, not what they store
    (a zero-stride `expand` of one value stores 4 bytes and copies to `numel * 4`)."""
    try:
        need = copied_nbytes(pa) + copied_nbytes(pb)
    except (RuntimeError, TypeError, NotImplementedError):
        return  # layouts whose parts cannot be listed are refused by the comparison itself
    if need == 0:  # both are read in place: nothing to allocate
        return
    stored = "their values are not stored contiguously and"
    what = f"{path}: comparing tensor{list(pa.shape)} {pa.dtype} ({stored} are copied whole)"
    require_fits(need, what, budget, COPY_FIX)


def compare_tensors(
    path: str,
    a: torch.Tensor,
    b: torch.Tensor,
    owners: StorageOwners,
    memory_budget: int | None = None,
) -> FieldReport:
    """One tensor field: type, metadata, requires_grad, stored bits and storage sharing.

    The copies reading the bits needs are checked against `memory_budget` (None: the memory
    available now) before any is made (:func:`require_copies_fit`)."""
    pa, pb = plain(a, path), plain(b, path)
    if pa.is_quantized or pb.is_quantized:
        # Their raw bytes are not the values (scale and zero point live outside), and reading
        # them as integers has crashed torch.equal.
        raise UncomparableError(
            path,
            "quantized tensors are not supported; compare t.int_repr() and t.q_scale()/"
            "t.q_zero_point() (or t.dequantize()) instead",
        )
    require_copies_fit(path, pa, pb, memory_budget)
    try:
        ia, ib = TensorInfo.of(a), TensorInfo.of(b)
        diffs = [] if type(a) is type(b) else ["type"]
        diffs += [name for name in _META_FIELDS if getattr(ia, name) != getattr(ib, name)]
        if ia.requires_grad != ib.requires_grad:
            diffs.append("requires_grad")
        diffs += _value_differences(pa, pb, ia, ib)
        if owners.differ(path, pa, pb):
            diffs.append("aliasing")
    except (RuntimeError, KeyError, TypeError, NotImplementedError) as exc:
        # e.g. sub-byte or nested tensors: their bits cannot be read as plain bytes.
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UncomparableError(path, f"cannot read the tensors' bits ({reason})") from None
    return FieldReport(path, not diffs, diffs, ia, ib)


@dataclass
class StorageOwners:
    """Which field first used each storage, per side: aliasing is part of the structure.

    Two tensors sharing a storage on one side and two separate storages on the other differ
    ("aliasing"), even with equal values: `torch.save` keeps the sharing, and an in-place write
    through one would show through the other. Storages are kept alive until the walk ends, so a
    freed storage's address cannot be mistaken for a shared one.
    """

    a: dict[int, tuple[str, int]]
    b: dict[int, tuple[str, int]]
    keep: list[Any]

    @classmethod
    def empty(cls) -> StorageOwners:
        return cls({}, {}, [])

    def _owners(
        self, side: dict[int, tuple[str, int]], path: str, t: torch.Tensor
    ) -> list[tuple[str, int]]:
        owners = []
        for index, (_, part) in enumerate(storage_parts(t)):
            storage = part.untyped_storage()
            self.keep.append(storage)
            owners.append(side.setdefault(storage._cdata, (path, index)))
        return owners

    def differ(self, path: str, a: torch.Tensor, b: torch.Tensor) -> bool:
        """Record both sides' storages; True when their first users differ."""
        return self._owners(self.a, path, a) != self._owners(self.b, path, b)
