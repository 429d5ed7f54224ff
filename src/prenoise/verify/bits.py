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
from typing import Any

import torch

__all__ = [
    "UncomparableError",
    "base_attribute",
    "copied_nbytes",
    "flat_bytes",
    "grad_of",
    "plain",
    "same_bits",
    "storage_parts",
    "tensor_sha256",
]


class UncomparableError(ValueError):
    """The inputs cannot be compared faithfully; `path` is the report label where it was found.

    Raised for unsupported value types (numpy arrays, sets, arbitrary objects, subclasses of
    plain values), reference cycles, unsupported or indistinguishable mapping keys, and (by
    `load_saved`) unreadable files.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


_COMPRESSED: dict[torch.layout, tuple[str, str]] = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_bsr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
    torch.sparse_bsc: ("ccol_indices", "row_indices"),
}


def base_attribute(t: torch.Tensor, name: str) -> Any:
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
    if base_attribute(t, "is_leaf") or base_attribute(t, "retains_grad"):
        grad = base_attribute(t, "grad")
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


def flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """A strided tensor's logical values as a flat uint8 tensor on the CPU.

    No copy when `t` is a contiguous CPU tensor; lazy conjugate/negative bits are resolved, so
    the bytes are the values the tensor means.
    """
    t = t.resolve_conj().resolve_neg().cpu().contiguous()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.reshape(-1).view(torch.uint8)


def copied_nbytes(t: torch.Tensor) -> int:
    """Bytes :func:`flat_bytes` allocates to read the plain tensor `t`'s stored parts (see
    :func:`storage_parts`), summed: nothing for a contiguous CPU part without lazy conjugate or
    negative bits (it is read in place), else its logical size, `numel * element_size`, once per
    copy (two at most alive at a time). What a tensor stores can be far less: `expand` of one
    value has stride 0 and stores one element whatever its shape. Meta tensors hold no data: 0.
    """
    if t.is_meta:
        return 0
    total = 0
    for _, part in storage_parts(t):
        copies = int(part.is_conj()) + int(part.is_neg())
        copies += int(part.device.type != "cpu" or not part.is_contiguous())
        total += min(copies, 2) * part.numel() * part.element_size()
    return total


def _digest_update(digest: Any, t: torch.Tensor) -> None:
    flat = flat_bytes(t)
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


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype, strides, offset and bytes (integers compared: NaN payloads and -0.0
    count)."""
    if (a.shape, a.dtype, a.stride(), a.storage_offset()) != (
        b.shape,
        b.dtype,
        b.stride(),
        b.storage_offset(),
    ):
        return False
    return torch.equal(flat_bytes(a), flat_bytes(b))
