"""How `compare` reads a tensor: its own storage, bit for bit, without running its class's code.

A tensor is read through a plain `torch.Tensor` alias made with torch-function handling off, so
neither a subclass's `__torch_function__` (which could answer `torch.equal` with True) nor its
Python overrides of `detach`, `shape`, ... take part. A subclass with `__torch_dispatch__`
computes its data in Python and is refused, as are tensors carrying Python attributes.

Each layout is compared on the tensors it stores, never through a transform such as
`to_dense()` (which adds duplicates and turns -0.0 into "no entry"): strided: the values;
COO: indices, values and the coalesced flag; CSR/BSR: crow_indices, col_indices, values;
CSC/BSC: ccol_indices, row_indices, values.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch

from prenoise.verify.reports import FieldReport, TensorInfo, UncomparableError

__all__ = ["StorageOwners", "compare_tensors", "grad_of", "plain", "storage_parts", "tensor_sha256"]

_COMPRESSED: dict[torch.layout, tuple[str, str]] = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_bsr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
    torch.sparse_bsc: ("ccol_indices", "row_indices"),
}
_META_FIELDS = ("shape", "dtype", "device", "layout", "stride", "storage_offset")


def _base(t: torch.Tensor, name: str) -> Any:
    """`t.name` as torch.Tensor itself defines it (a subclass may override the attribute)."""
    with torch._C.DisableTorchFunction():
        return getattr(torch._C.TensorBase, name).__get__(t)


def plain(t: torch.Tensor, path: str = "<root>") -> torch.Tensor:
    """A detached `torch.Tensor` alias of `t`'s storage, made without running `t`'s class's code.

    Raises :class:`UncomparableError` for a `__torch_dispatch__` subclass (its data is computed
    by Python code) and for a tensor with Python attributes (state `compare` would not see).
    """
    cls = type(t)
    if getattr(cls, "__torch_dispatch__", None) is not torch.Tensor.__torch_dispatch__:
        raise UncomparableError(
            path, f"tensor subclass {cls.__qualname__} defines __torch_dispatch__"
        )
    attributes = object.__getattribute__(t, "__dict__")
    if attributes:
        names = ", ".join(sorted(map(str, attributes)))[:200]
        raise UncomparableError(path, f"tensor carries Python attributes ({names})")
    with torch._C.DisableTorchFunction():
        if cls is torch.Tensor:
            return torch._C.TensorBase.detach(t)
        try:
            return torch._C.TensorBase.as_subclass(t, torch.Tensor).detach()
        except (RuntimeError, NotImplementedError) as exc:  # e.g. a sparse subclass
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UncomparableError(path, f"cannot read the tensors' bits ({reason})") from None


def grad_of(t: torch.Tensor) -> torch.Tensor | None:
    """`t.grad` as autograd holds it (only leaves and `retain_grad` tensors can have one)."""
    if _base(t, "is_leaf") or _base(t, "retains_grad"):
        grad = _base(t, "grad")
        return grad if isinstance(grad, torch.Tensor) else None
    return None


def storage_parts(t: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The tensors a plain tensor's layout stores, named, in a fixed order (see module doc)."""
    if t.layout == torch.strided:
        return [("values", t)]
    if t.layout == torch.sparse_coo:
        return [("indices", t._indices()), ("values", t._values())]
    if t.layout in _COMPRESSED:
        compressed, plain_indices = _COMPRESSED[t.layout]
        return [
            (compressed, getattr(t, compressed)()),
            (plain_indices, getattr(t, plain_indices)()),
            ("values", t.values()),
        ]
    raise TypeError(f"layout {t.layout} is not supported")


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """A strided tensor's logical values as a flat uint8 tensor on the CPU.

    No copy when `t` is a contiguous CPU tensor; lazy conjugate/negative bits are resolved, so
    the bytes are the values the tensor means.
    """
    t = t.resolve_conj().resolve_neg().cpu().contiguous()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.reshape(-1).view(torch.uint8)


def _digest_update(digest: Any, t: torch.Tensor) -> None:
    flat = _flat_bytes(t)
    if flat.numel():
        digest.update(flat.numpy().data)  # a memoryview of the tensor's own bytes: no copy


def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 of the tensor's stored values in logical (row-major) order, on CPU.

    Strided: its values' bytes. Sparse layouts: the bytes of each stored tensor in the order
    of the module docstring (COO: indices then values). Meta tensors have no data: "".
    """
    p = plain(t)
    if p.is_meta:
        return ""
    digest = hashlib.sha256()
    for _, part in storage_parts(p):
        _digest_update(digest, part)
    return digest.hexdigest()


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype, strides, offset and bytes (integers compared: NaN payloads and -0.0
    count)."""
    if (a.shape, a.dtype, a.stride(), a.storage_offset()) != (
        b.shape,
        b.dtype,
        b.stride(),
        b.storage_offset(),
    ):
        return False
    return torch.equal(_flat_bytes(a), _flat_bytes(b))


def _value_differences(
    pa: torch.Tensor, pb: torch.Tensor, ia: TensorInfo, ib: TensorInfo
) -> list[str]:
    if pa.is_meta or pb.is_meta:
        return []  # no data to compare; the device difference (if any) is already reported
    if pa.layout != pb.layout:
        return ["values"] if ia.sha256 != ib.sha256 else []
    if pa.layout == torch.strided:
        if ia.shape == ib.shape and ia.dtype == ib.dtype:
            equal = torch.equal(_flat_bytes(pa), _flat_bytes(pb))
        else:  # the bytes alone, for the report (the metadata already differs)
            equal = ia.sha256 == ib.sha256
        return [] if equal else ["values"]
    diffs = [
        name
        for (name, x), (_, y) in zip(storage_parts(pa), storage_parts(pb), strict=True)
        if not _same_bits(x, y)
    ]
    if pa.layout == torch.sparse_coo and pa.is_coalesced() != pb.is_coalesced():
        diffs.append("coalesced")
    return diffs


def compare_tensors(
    path: str, a: torch.Tensor, b: torch.Tensor, owners: StorageOwners
) -> FieldReport:
    """One tensor field: type, metadata, requires_grad, stored bits and storage sharing."""
    pa, pb = plain(a, path), plain(b, path)
    if pa.is_quantized or pb.is_quantized:
        # Their raw bytes are not the values (scale and zero point live outside), and reading
        # them as integers has crashed torch.equal.
        raise UncomparableError(
            path,
            "quantized tensors are not supported; compare t.int_repr() and t.q_scale()/"
            "t.q_zero_point() (or t.dequantize()) instead",
        )
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
