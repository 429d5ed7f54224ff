"""Bitwise verification of nested structures (the overlapped path vs the serial one).

`compare(a, b)` walks dicts, dataclasses, lists/tuples, tensors and plain values and reports,
per field path, whether the two sides are identical. What is compared, exactly:

- **Containers** (`prenoise.verify.containers`): `dict` and its subclasses (OrderedDict,
  defaultdict, a `state_dict()`), `list`, `tuple` and their subclasses, dataclass instances:
  their items or fields and every other piece of their state (instance attributes and slots,
  labelled `container@name`: a state_dict's `_metadata`, attributes set in `__post_init__`; a
  defaultdict's factory; an OrderedDict's key order, which a plain dict's equality ignores). A
  `Mapping` that is not a dict is refused, as are containers nested deeper than 10,000 levels.

- **Tensors**: exact type, shape, dtype, device, layout, strides, storage offset,
  requires_grad, the stored bits of each layout (`prenoise.verify.tensors`: strided values;
  COO indices, values and coalesced flag; CSR/BSR/CSC/BSC compressed and plain indices and
  values; never through `to_dense()`), NaN payloads and -0.0 included; `grad` as its own field
  (`x.grad`); and storage sharing: a field that shares a storage with an earlier field on one
  side only differs as "aliasing". A sha256 of each side's stored bytes is recorded. Tensors are
  read as `torch.Tensor` defines them: a subclass's `__torch_function__` and Python overrides
  take no part; `__torch_dispatch__` subclasses, quantized tensors and tensors with Python
  attributes are refused.
- **Plain values** (`prenoise.verify.leaves`): exact types only: None, bool, int, float,
  complex, str, bytes, torch dtypes/devices/layouts/memory formats, enum members (by identity),
  and pathlib's own path classes (exact class and `str()`, case-sensitive: pathlib normalises a
  path when it is built, so `PurePosixPath("a//b")` *is* `PurePosixPath("a/b")` and pickling
  keeps only that). Floats and complex numbers on their IEEE-754 bits. Subclasses of these
  (an `int` whose `==` always says True) are refused.

A verifier must never say "equal" for different inputs, so it refuses what it cannot compare
faithfully with :class:`UncomparableError` instead of guessing: values of other types (numpy
arrays, sets, arbitrary objects whose `==` proves nothing), reference cycles, and mapping keys
that are neither plain values nor tuples of them (nested at most 100 deep). Mapping keys are
matched by type and value (`1`, `1.0`, `True` and `"1"` are four different keys), and every
field gets its own label.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from prenoise.verify.containers import (
    MAX_DEPTH,
    ByIdentity,
    attributes,
    check_container,
    expanded_size,
    is_container,
    items_of,
    key_order_matters,
)
from prenoise.verify.files import _load_failure, declared_nbytes, load_saved, require_inputs_fit
from prenoise.verify.leaves import (
    LEAF_BASES,
    float_bits,
    identity,
    is_leaf,
    leaf_equal,
    subclass_refusal,
    type_name,
)
from prenoise.verify.reports import ComparisonReport, FieldReport, TensorInfo, UncomparableError
from prenoise.verify.tensors import StorageOwners, compare_tensors, grad_of, tensor_sha256

__all__ = [
    "ComparisonReport",
    "FieldReport",
    "TensorInfo",
    "UncomparableError",
    "compare",
    "declared_nbytes",
    "load_saved",
    "nest_dotted",
    "require_inputs_fit",
    "tensor_sha256",
]
_ = _load_failure  # kept importable from here (tests read its one-line reasons)

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _key_segment(key: Any) -> str:
    """A mapping key's label segment: `name` for plain identifiers, else `[repr]`.

    `repr` keeps the type visible (`[1]`, `['1']`, `[1.0]`, `[True]`); floats that are NaN also
    show their bits, so two distinct NaN keys get distinct labels.
    """
    if type(key) is str and _PLAIN_NAME.match(key):
        return key
    if isinstance(key, float) and math.isnan(key):
        return f"[nan:0x{float_bits(key)[::-1].hex()}]"
    return f"[{key!r}]"


def _join(path: str, segment: str) -> str:
    if not path:
        return segment
    return path + segment if segment[:1] in ("[", "@") else f"{path}.{segment}"


def _children(x: Any, path: str) -> dict[Any, tuple[str, Any]] | None:
    """`{identity: (label segment, value)}` of a container (its items or fields, then its other
    attributes: `prenoise.verify.containers`), or None for a non-container."""
    if not is_container(x):
        return None
    label = path or "<root>"
    out: dict[Any, tuple[str, Any]] = {}
    known: frozenset[str] = frozenset()
    if isinstance(x, dict):
        segments: set[str] = set()
        for key, value in items_of(x):
            ident = identity(key, label)
            segment = _key_segment(key)
            if ident in out or segment in segments:
                raise UncomparableError(label, f"two mapping keys cannot be told apart ({key!r})")
            out[ident] = (segment, value)
            segments.add(segment)
    elif isinstance(x, list | tuple):
        out = {i: (str(i), v) for i, v in items_of(x)}
    else:  # a dataclass instance
        names = [f.name for f in dataclasses.fields(x)]
        out = {name: (name, getattr(x, name)) for name in names}
        known = frozenset(names)
    for name, value in attributes(x, label, known).items():
        out[(_ATTRIBUTE, name)] = (f"@{name}", value)
    return out


_ATTRIBUTE = object()  # the identity of an attribute: (_ATTRIBUTE, name), never a key's


def _check_supported(x: Any, path: str) -> None:
    # type(x), not isinstance: an object can claim any `__class__`, and an `==` that always says
    # True must not pass for an int.
    if is_leaf(x) or type(x) is ByIdentity or issubclass(type(x), torch.Tensor):
        return
    check_container(x, path)
    if is_container(x):
        return
    if issubclass(type(x), LEAF_BASES):
        raise subclass_refusal(x, path)
    hint = " (convert it with torch.from_numpy)" if type(x).__module__ == "numpy" else ""
    raise UncomparableError(path, f"cannot compare values of type {type_name(x)}{hint}")


def _describe(x: Any) -> str:
    if type(x) is ByIdentity:
        return repr(x)
    if isinstance(x, torch.Tensor):
        return f"tensor{list(x.shape)} {x.dtype}"
    if isinstance(x, Mapping | list | tuple):
        return f"{type_name(x)} of {len(x)} items"
    if dataclasses.is_dataclass(x):
        return type_name(x)
    if type(x) in (str, bytes):  # repr of the head only: a long value is not copied whole
        return f"{type_name(x)}: {x[:200]!r}"[:200]
    return f"{type_name(x)}: {x!r}"[:200]


def _grad_item(path: str, x: torch.Tensor, y: torch.Tensor) -> tuple[Any, ...] | FieldReport | None:
    """The grads of two tensor fields: a walk item (both have one), a report (one has), or None."""
    gx, gy = grad_of(x), grad_of(y)
    child = _join(path, "grad")
    if gx is None and gy is None:
        return None
    if gy is None:
        return FieldReport(child, False, ["missing in b"], _describe(gx), None)
    if gx is None:
        return FieldReport(child, False, ["missing in a"], None, _describe(gy))
    return (child, gx, gy)


_LEAVE = object()  # stack marker: the walk leaves a container pair

MAX_FIELDS = 1_000_000
"""Fields (containers, tensors and plain values: each label once) one comparison visits at most;
more is refused (exit 2 on the CLI) in bounded time and memory, the report alone would take
about 0.5 GB. Shared references do not escape it: `x = [x, x]` saved n times is n objects in
~1.7 KB for any n, but 2^n labels, each of which a report lists."""

_MEMO_MIN_LEN = 256  # str/bytes leaves at least this long: their comparison result is kept


def _memo_key(x: Any, y: Any) -> tuple[int, int] | None:
    """The key under which the report for the pair `(x, y)` is kept (their ids): tensors, and
    long strings or bytes, whose comparison costs their size; None for everything else (cheap
    to compare again, or fresh objects each time, such as state read by identity). The memo
    keeps both objects alive, so an id is never reused under it."""
    if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
        return (id(x), id(y))
    if type(x) in (str, bytes) and type(y) is type(x) and len(x) >= _MEMO_MIN_LEN:
        return (id(x), id(y))
    return None


def _too_many_fields() -> UncomparableError:
    return UncomparableError(
        "<root>",
        f"more than {MAX_FIELDS:,} fields to compare (a shared reference counts once per "
        "place it appears); compare smaller parts",
    )


def _require_few_fields(a: Any, b: Any) -> None:
    """Refuse, before walking, two structures that both expand to more than `MAX_FIELDS`
    labels (counted once per shared object: `containers.expanded_size`)."""
    if expanded_size(a, MAX_FIELDS) > MAX_FIELDS and expanded_size(b, MAX_FIELDS) > MAX_FIELDS:
        raise _too_many_fields()


def _walk(a: Any, b: Any, memory_budget: int | None = None) -> Iterator[FieldReport]:
    """Depth-first, no recursion, cycle-checked, at most `MAX_DEPTH` levels deep and
    `MAX_FIELDS` labels. At each level, keys missing on one side are reported first (then an
    `OrderedDict`'s key order), then the shared keys' subtrees in key order (a's keys, then b's
    extra ones).

    A pair of tensors (or of long strings) met again under another label (the same two objects,
    shared on both sides) is reported as it was the first time, without reading it again: a
    zero-stride tensor listed many times is copied once, not once per label."""
    stack: list[tuple[Any, ...]] = [("", a, b, 0)]
    active: set[tuple[int, int]] = set()  # (id(a), id(b)) of the containers being walked
    owners = StorageOwners.empty()
    seen: dict[tuple[int, int], tuple[Any, Any, FieldReport]] = {}  # pair -> (x, y, report)
    visited = 0
    while stack:
        item = stack.pop()
        if item[0] is _LEAVE:
            active.discard(item[1])
            continue
        visited += 1
        if visited > MAX_FIELDS:  # a backstop: `_require_few_fields` counts a lower bound
            raise _too_many_fields()
        path, x, y, depth = item
        label = path or "<root>"
        _check_supported(x, label)
        _check_supported(y, label)
        key = _memo_key(x, y)
        if key is not None and key in seen:
            first = seen[key][2]
            yield FieldReport(label, first.equal, list(first.differences), first.a, first.b)
        elif isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            report = compare_tensors(label, x, y, owners, memory_budget)
            seen[(id(x), id(y))] = (x, y, report)
            yield report
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            grads = _grad_item(path, x, y)
            if isinstance(grads, FieldReport):
                yield grads
            elif grads is not None:
                stack.append((*grads, depth + 1))
            continue
        if key is not None and key in seen:
            continue
        if type(x) is not type(y):
            yield FieldReport(label, False, ["type"], _describe(x), _describe(y))
            continue
        cx, cy = _children(x, path), _children(y, path)
        if cx is None or cy is None:
            equal = x.obj is y.obj if type(x) is ByIdentity else leaf_equal(x, y)
            report = FieldReport(
                label, equal, [] if equal else ["values"], _describe(x), _describe(y)
            )
            if key is not None:
                seen[key] = (x, y, report)
            yield report
            continue
        if depth >= MAX_DEPTH:
            where = f"{label[:60]}…" if len(label) > 80 else label
            raise UncomparableError(where, f"nested deeper than {MAX_DEPTH} containers")
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
                todo.append((_join(path, cx[ident][0]), cx[ident][1], cy[ident][1], depth + 1))
        if key_order_matters(x):
            order = _key_order_report(label, cx, cy)
            if order is not None:
                yield order
        stack.extend(reversed(todo))


def _key_order_report(
    label: str, cx: dict[Any, tuple[str, Any]], cy: dict[Any, tuple[str, Any]]
) -> FieldReport | None:
    """A difference "key order" when the keys both OrderedDicts hold come in another order."""
    keys_a = [k for k in cx if k in cy and not _is_attribute(k)]
    keys_b = [k for k in cy if k in cx and not _is_attribute(k)]
    if keys_a == keys_b:
        return None
    first = next(i for i, (p, q) in enumerate(zip(keys_a, keys_b, strict=True)) if p != q)
    return FieldReport(
        label,
        False,
        ["key order"],
        f"key {first}: {cx[keys_a[first]][0]}",
        f"key {first}: {cy[keys_b[first]][0]}",
    )


def _is_attribute(ident: Any) -> bool:
    return type(ident) is tuple and len(ident) == 2 and ident[0] is _ATTRIBUTE


def compare(a: Any, b: Any, *, memory_budget: int | None = None) -> ComparisonReport:
    """Compare two nested structures field by field; see the module docstring for what counts.

    Reading a tensor's bits copies it whole where it is not stored contiguously (a zero-stride
    `expand` stores one element for any shape): those copies are checked against
    `memory_budget` bytes (None: the memory available now) before each is made, and a pair
    that does not fit is refused with `BudgetExceededError`. At most `MAX_FIELDS` labels are
    visited (shared references count once per label); a tensor pair met again under another
    label is not read again.

    Field labels join identifier-like string keys, dataclass field names and sequence indices
    with dots (`"conditions.0.noise"`); any other mapping key is shown as `[repr(key)]`
    (`"scores[1]"`, `"scores['1']"`, `"['a.b']"`); a tensor's grad is `"<label>.grad"`. A key
    present on one side only is reported as a difference. Raises :class:`UncomparableError` for
    what cannot be compared faithfully, including two fields whose labels coincide (two key
    types that print alike, e.g. members of two enum classes with one name): a report never
    merges two fields.
    """
    _require_few_fields(a, b)
    fields: dict[str, FieldReport] = {}
    for report in _walk(a, b, memory_budget):
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
