"""Bitwise verification of nested structures (the overlapped path vs the serial one).

`compare(a, b)` walks mappings, dataclasses, lists/tuples, tensors and plain values and reports,
per field path, whether the two sides are identical: for tensors the values are compared on
their bit patterns (so NaN payloads and -0.0 count), together with type, shape, dtype, device,
layout, strides, storage offset and requires_grad; a sha256 of each side's contiguous bytes is
recorded. Floats are compared on their IEEE-754 bits too.

A verifier must never say "equal" for different inputs, so it refuses what it cannot compare
faithfully with :class:`UncomparableError` instead of guessing: values of other types (numpy
arrays, sets, arbitrary objects whose `==` proves nothing), reference cycles, and mapping keys
that are neither plain values nor tuples of them. Mapping keys are matched by type and value
(`1`, `1.0`, `True` and `"1"` are four different keys), and every field gets its own label.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import os
import pathlib
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "ComparisonReport",
    "FieldReport",
    "TensorInfo",
    "UncomparableError",
    "compare",
    "load_saved",
    "nest_dotted",
    "tensor_sha256",
]

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# Leaves whose `==` within one exact type is a faithful identity (floats are compared on bits).
_LEAF_TYPES: tuple[type, ...] = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    enum.Enum,
    pathlib.PurePath,
)
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class UncomparableError(ValueError):
    """The inputs cannot be compared faithfully; `path` is the report label where it was found.

    Raised for unsupported value types (numpy arrays, sets, arbitrary objects), reference cycles,
    unsupported or indistinguishable mapping keys, and (by `load_saved`) unreadable files.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


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
    if a.is_quantized or b.is_quantized:
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
        diffs += [
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
    except (RuntimeError, KeyError, TypeError, NotImplementedError) as exc:
        # e.g. quantized or sub-byte tensors: their bits cannot be read as plain integers.
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UncomparableError(path, f"cannot read the tensors' bits ({reason})") from None
    return FieldReport(path, not diffs, diffs, ia, ib)


def _float_bits(x: float | complex) -> bytes:
    """IEEE-754 bits (real then imaginary part for a complex)."""
    if isinstance(x, complex):
        return struct.pack("<dd", x.real, x.imag)
    return struct.pack("<d", x)


def _identity(x: Any, path: str) -> Any:
    """A hashable value equal for two leaves exactly when they are the same type and value."""
    if isinstance(x, tuple) and type(x) is tuple:
        return (tuple, tuple(_identity(v, path) for v in x))
    if not isinstance(x, _LEAF_TYPES):
        raise UncomparableError(path, f"unsupported mapping key type {_type_name(x)}: {x!r}"[:300])
    if isinstance(x, float | complex):
        return (type(x), _float_bits(x))
    if isinstance(x, enum.Enum):
        return (type(x), x.name)
    return (type(x), x)


def _leaf_equal(a: Any, b: Any) -> bool:
    """Same type (checked by the caller) and the same value; floats on their bits."""
    if isinstance(a, float | complex):
        return _float_bits(a) == _float_bits(b)
    if isinstance(a, enum.Enum):
        return a is b
    return bool(a == b)


def _type_name(x: Any) -> str:
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _key_segment(key: Any) -> str:
    """A mapping key's label segment: `name` for plain identifiers, else `[repr]`.

    `repr` keeps the type visible (`[1]`, `['1']`, `[1.0]`, `[True]`); floats that are NaN also
    show their bits, so two distinct NaN keys get distinct labels.
    """
    if type(key) is str and _PLAIN_NAME.match(key):
        return key
    if isinstance(key, float) and math.isnan(key):
        return f"[nan:0x{_float_bits(key)[::-1].hex()}]"
    return f"[{key!r}]"


def _join(path: str, segment: str) -> str:
    if not path:
        return segment
    return path + segment if segment.startswith("[") else f"{path}.{segment}"


def _children(x: Any, path: str) -> dict[Any, tuple[str, Any]] | None:
    """`{identity: (label segment, value)}` of a container, or None for a non-container."""
    if isinstance(x, Mapping):
        out: dict[Any, tuple[str, Any]] = {}
        segments: set[str] = set()
        for key, value in x.items():
            ident = _identity(key, path or "<root>")
            segment = _key_segment(key)
            if ident in out or segment in segments:
                raise UncomparableError(
                    path or "<root>", f"two mapping keys cannot be told apart ({key!r})"
                )
            out[ident] = (segment, value)
            segments.add(segment)
        return out
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: (f.name, getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, list | tuple):
        return {i: (str(i), v) for i, v in enumerate(x)}
    return None


def _check_supported(x: Any, path: str) -> None:
    # type(x), not isinstance: an object can claim any `__class__`, and an `==` that always says
    # True must not pass for an int.
    if issubclass(type(x), (torch.Tensor, Mapping, list, tuple, *_LEAF_TYPES)):
        return
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return
    hint = " (convert it with torch.from_numpy)" if type(x).__module__ == "numpy" else ""
    raise UncomparableError(path, f"cannot compare values of type {_type_name(x)}{hint}")


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor{list(x.shape)} {x.dtype}"
    if isinstance(x, Mapping | list | tuple):
        return f"{_type_name(x)} of {len(x)} items"
    if dataclasses.is_dataclass(x):
        return _type_name(x)
    return f"{_type_name(x)}: {x!r}"[:200]


_LEAVE = object()  # stack marker: the walk leaves a container pair


def _walk(a: Any, b: Any) -> Iterator[FieldReport]:
    """Depth-first, no recursion, cycle-checked. At each level, keys missing on one side are
    reported first, then the shared keys' subtrees in key order (a's keys, then b's extra ones)."""
    stack: list[tuple[Any, ...]] = [("", a, b)]
    active: set[tuple[int, int]] = set()  # (id(a), id(b)) of the containers being walked
    while stack:
        item = stack.pop()
        if item[0] is _LEAVE:
            active.discard(item[1])
            continue
        path, x, y = item
        label = path or "<root>"
        _check_supported(x, label)
        _check_supported(y, label)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            yield _compare_tensors(label, x, y)
            continue
        if type(x) is not type(y):
            yield FieldReport(label, False, ["type"], _describe(x), _describe(y))
            continue
        cx, cy = _children(x, path), _children(y, path)
        if cx is None or cy is None:
            equal = _leaf_equal(x, y)
            yield FieldReport(label, equal, [] if equal else ["values"], _describe(x), _describe(y))
            continue
        pair = (id(x), id(y))
        if pair in active:
            raise UncomparableError(label, "reference cycle (a container contains itself)")
        active.add(pair)
        stack.append((_LEAVE, pair))
        todo: list[tuple[Any, ...]] = []
        for ident in list(cx) + [k for k in cy if k not in cx]:
            if ident not in cy:
                segment, value = cx[ident]
                child = _join(path, segment)
                yield FieldReport(child, False, ["missing in b"], _describe(value), None)
            elif ident not in cx:
                segment, value = cy[ident]
                child = _join(path, segment)
                yield FieldReport(child, False, ["missing in a"], None, _describe(value))
            else:
                todo.append((_join(path, cx[ident][0]), cx[ident][1], cy[ident][1]))
        stack.extend(reversed(todo))


def compare(a: Any, b: Any) -> ComparisonReport:
    """Compare two nested structures field by field; see the module docstring for what counts.

    Field labels join identifier-like string keys, dataclass field names and sequence indices
    with dots (`"conditions.0.noise"`); any other mapping key is shown as `[repr(key)]`
    (`"scores[1]"`, `"scores['1']"`, `"['a.b']"`). A key present on one side only is reported
    as a difference. Raises :class:`UncomparableError` for what cannot be compared faithfully,
    including two fields whose labels coincide (two key types that print alike, e.g. members
    of two enum classes with one name): a report never merges two fields.
    """
    fields: dict[str, FieldReport] = {}
    for report in _walk(a, b):
        if report.path in fields:  # e.g. enum keys of two same-named classes
            raise UncomparableError(report.path, "two different fields have the same label")
        fields[report.path] = report
    return ComparisonReport(fields)


def nest_dotted(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`{"denoise.text": t}` as `{"denoise": {"text": t}}`, so `compare` labels it `denoise.text`.

    (`compare` shows a dotted key as `['denoise.text']`, so that it never shares a label with a
    nested field; nesting keeps a report's labels the dotted names.)
    """
    root: dict[str, Any] = {}
    for name, value in fields.items():
        *parents, leaf = name.split(".")
        node = root
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return root


def load_saved(path: str | os.PathLike[str]) -> Any:
    """`torch.load(path, weights_only=True)` on the CPU, or :class:`UncomparableError` naming why.

    One-line reasons: no such file, a directory, unreadable, empty, or not a (complete)
    `torch.save` file: truncated, corrupt, or holding objects `weights_only` refuses.
    """
    p = pathlib.Path(path)
    if p.is_dir():
        raise UncomparableError(str(p), "is a directory, not a torch.save file")
    if not p.exists():
        raise UncomparableError(str(p), "no such file")
    try:
        f = p.open("rb")
    except OSError as exc:
        raise UncomparableError(str(p), f"cannot read ({exc.strerror or exc})") from None
    with f:
        if os.fstat(f.fileno()).st_size == 0:
            raise UncomparableError(str(p), "empty file, not a torch.save file")
        try:
            return torch.load(f, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch.load raises many types for a bad file; all mean this
            reason = _load_failure(exc)
    raise UncomparableError(str(p), f"not a readable torch.save file: {reason}")


def _load_failure(exc: Exception) -> str:
    """The informative line of a `torch.load` error (its first lines are boilerplate)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "WeightsUnpickler error:" in line:
            after = line.split("WeightsUnpickler error:", 1)[1].strip()
            # torch sometimes puts the detail on the next line
            detail = after or next((rest.strip() for rest in lines[i + 1 :] if rest.strip()), "")
            detail = detail.split(". ")[0] or "no reason given"
            return f"holds objects weights_only=True refuses ({detail})"[:300]
    first = text.strip().splitlines()[0].split(". ")[0] if text.strip() else ""
    return f"truncated or corrupt ({type(exc).__name__}: {first})"[:300]
