"""Reading `torch.save` and safetensors files for `compare`, bounded before anything is inflated.

`torch.load` allocates every archive entry at its declared uncompressed size (a DEFLATE entry
of 2 MB can declare gigabytes), so the sizes the zip's central directory declares
(`ZipInfo.file_size`) are summed and checked against a memory budget before loading.

A `torch.save` file is loaded with `weights_only=True`: nothing it names is imported or called
unless torch allows it. A file whose pickle would import or call something else (`os.system`
in a `__reduce__`) is "refused as unsafe", naming it; a file torch cannot parse is "truncated or
corrupt". A safetensors file (found by its header, whatever its name) is read with the
`safetensors` package (the `ref2va` extra): its tensors by name, and its `__metadata__` as a
field of its own.
"""

from __future__ import annotations

import os
import pathlib
import re
import zipfile
from collections.abc import Sequence
from typing import Any

import torch

from prenoise.guards.budget import allocation_failure, format_bytes, require_fits
from prenoise.guards.env import EnvVarError
from prenoise.guards.extras import MissingExtraError
from prenoise.guards.path_checks import not_a_file, path_problem
from prenoise.verify.reports import UncomparableError

__all__ = ["declared_nbytes", "is_safetensors", "load_saved", "require_inputs_fit"]

BUDGET_FIX = "set a larger budget with --memory-budget SIZE (e.g. 16GiB) if the memory is there"


def _shown(path: str | os.PathLike[str]) -> str:
    """`path` for a one-line message: long names cut, NUL bytes escaped."""
    text = repr(os.fspath(path))[1:-1]
    return text if len(text) <= 80 else text[:77] + "…"


def _checked_file(path: str | os.PathLike[str]) -> pathlib.Path:
    """`path` if it is a non-empty regular file that can be opened; else UncomparableError."""
    problem = path_problem(path)  # a NUL byte or an over-long name: the OS would raise
    if problem is not None:
        raise UncomparableError(_shown(path), f"the path {problem}")
    p = pathlib.Path(path)
    if p.is_dir():
        raise UncomparableError(str(p), "is a directory, not a torch.save file")
    try:
        os.stat(p)
    except FileNotFoundError:
        raise UncomparableError(str(p), "no such file") from None
    except OSError as exc:  # a symlink loop, a parent that cannot be searched
        raise UncomparableError(str(p), f"cannot be read ({exc.strerror or exc})") from None
    if not p.is_file():  # /dev/zero is "empty" by its size, but a device, not a file
        raise UncomparableError(str(p), not_a_file(p))
    try:
        with p.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        raise UncomparableError(str(p), f"cannot read ({exc.strerror or exc})") from None
    if size == 0:
        raise UncomparableError(str(p), "empty file, not a torch.save file")
    return p


def declared_nbytes(path: str | os.PathLike[str]) -> int:
    """Bytes `torch.load` may inflate `path` to, read without inflating anything.

    A zip archive (the `torch.save` format): the sum of its entries' declared uncompressed
    sizes. Anything else (the legacy format, or a file torch.load will refuse): its size on
    disk. Raises :class:`UncomparableError` as `load_saved` does for missing, empty or
    unreadable files.
    """
    p = _checked_file(path)
    try:
        with zipfile.ZipFile(p) as archive:
            return sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError):
        return p.stat().st_size
    except OSError as exc:
        raise UncomparableError(str(p), f"cannot read ({exc.strerror or exc})") from None


def require_inputs_fit(paths: Sequence[str | os.PathLike[str]], budget: int | None = None) -> int:
    """Refuse, before loading, files whose declared contents together exceed `budget` bytes;
    returns their sum.

    `budget` None: the memory available now (`prenoise.guards.budget`). Raises
    `BudgetExceededError` (one line naming each file's size) or :class:`UncomparableError`.
    """
    sizes = [(str(p), declared_nbytes(p)) for p in paths]
    named = ", ".join(f"{name} {format_bytes(n)}" for name, n in sizes)
    what = f"loading the inputs ({named} uncompressed)"
    total = sum(n for _, n in sizes)
    require_fits(total, what, budget, BUDGET_FIX)
    return total


_SAFETENSORS_HEADER_MAX = 100_000_000
"""The largest header the safetensors format allows (its own reader refuses more)."""


def is_safetensors(path: str | os.PathLike[str]) -> bool:
    """Whether `path` starts as a safetensors file does: an 8-byte little-endian header length
    that fits in the file, then `{`. (A `torch.save` zip starts `PK`, its legacy format with a
    pickle opcode: neither can.)"""
    try:
        with open(path, "rb") as f:
            head = f.read(9)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return False
    if len(head) < 9 or head[8:9] != b"{":
        return False
    length = int.from_bytes(head[:8], "little")
    return length <= min(size - 8, _SAFETENSORS_HEADER_MAX)


def _load_safetensors(p: pathlib.Path) -> dict[str, Any]:
    """A safetensors file as `{name: tensor}`, plus `{"__metadata__": {...}}` when it has any
    (the format reserves that name); the `safetensors` package reads it (no code runs)."""
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError:
        raise MissingExtraError(
            "ref2va", ["safetensors"], f"reading the safetensors file {_shown(p)}"
        ) from None
    out: dict[str, Any] = {}
    try:
        with safe_open(str(p), framework="pt", device="cpu") as f:
            metadata = f.metadata()
            for name in f.keys():  # noqa: SIM118 - a safe_open handle is no dict
                out[name] = f.get_tensor(name)
    except (SafetensorError, OSError, ValueError, RuntimeError, TypeError) as exc:
        if allocation_failure(exc) is not None:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UncomparableError(str(p), f"not a readable safetensors file: {first}"[:300]) from None
    if metadata:
        out["__metadata__"] = dict(metadata)
    return out


def _check_torch_load_environment() -> None:
    """torch.load raises the same `RuntimeError` for every file when both of its weights-only
    variables are set: name them, rather than calling every input corrupt."""
    true_values = ("1", "y", "yes", "true")
    names = ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    if all(os.environ.get(name, "0").lower() in true_values for name in names):
        raise EnvVarError(
            f"{names[0]} and {names[1]} are both set, and torch.load refuses every file then; "
            "unset one (compare loads with weights_only=True either way)"
        )


def load_saved(path: str | os.PathLike[str], memory_budget: int | None = None) -> Any:
    """`torch.load(path, weights_only=True)` on the CPU, or :class:`UncomparableError` naming why.

    One-line reasons: no such file, a directory, unreadable, empty, or not a (complete)
    `torch.save` file: truncated, corrupt, or holding objects `weights_only` refuses. A file
    whose declared contents exceed `memory_budget` bytes (None: the memory available now) is
    refused first with `BudgetExceededError`.
    """
    require_inputs_fit([path], memory_budget)
    p = pathlib.Path(path)
    if is_safetensors(p):
        return _load_safetensors(p)
    _check_torch_load_environment()
    try:
        f = p.open("rb")
    except OSError as exc:
        raise UncomparableError(str(p), f"cannot read ({exc.strerror or exc})") from None
    with f:
        try:
            return torch.load(f, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch.load raises many types for a bad file; all mean this
            if allocation_failure(exc) is not None:  # but low memory is not the file's fault
                raise
            unsafe = _unsafe_reason(exc)
            reason = _load_failure(exc)
    if unsafe is not None:
        raise UncomparableError(str(p), f"refused as unsafe: {unsafe}")
    raise UncomparableError(str(p), f"not a readable torch.save file: {reason}")


_UNSAFE = (
    (re.compile(r"unsupported GLOBAL (\S+) whose module (\S+) is blocked"), "it imports {0}"),
    (
        re.compile(r"call reduce for unrecognized function (.+?)(?: which belongs to|$)"),
        "it calls {0}",
    ),
    (re.compile(r"Can only create new object .* but got (.+)$"), "it creates a {0}"),
    (re.compile(r"Can only build Tensor, .* but got (.+)$"), "it builds a {0}"),
)


def _unsafe_reason(exc: Exception) -> str | None:
    """What a pickle torch's weights-only loader refused to run would have done (import a
    blocked module, call or build something not allowed), or None for any other failure."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    for line in text.splitlines():
        for pattern, words in _UNSAFE:
            found = pattern.search(line)
            if found:
                did = words.format(*(g.strip().rstrip(".") for g in found.groups()))
                return (
                    f"{did}, which torch.load with weights_only=True does not allow; nothing in "
                    "it was run (it is not a plain torch.save file of tensors and containers)"
                )[:300]
    return None


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
