"""Reading `torch.save` files for `compare`, bounded before anything is inflated.

`torch.load` allocates every archive entry at its declared uncompressed size (a DEFLATE entry
of 2 MB can declare gigabytes), so the sizes the zip's central directory declares
(`ZipInfo.file_size`) are summed and checked against a memory budget before loading.
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
from prenoise.guards.path_checks import not_a_file, path_problem
from prenoise.verify.reports import UncomparableError

__all__ = ["declared_nbytes", "load_saved", "require_inputs_fit"]

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
    if not p.exists():
        raise UncomparableError(str(p), "no such file")
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


def require_inputs_fit(paths: Sequence[str | os.PathLike[str]], budget: int | None = None) -> None:
    """Refuse, before loading, files whose declared contents together exceed `budget` bytes.

    `budget` None: the memory available now (`prenoise.guards.budget`). Raises
    `BudgetExceededError` (one line naming each file's size) or :class:`UncomparableError`.
    """
    sizes = [(str(p), declared_nbytes(p)) for p in paths]
    named = ", ".join(f"{name} {format_bytes(n)}" for name, n in sizes)
    what = f"loading the inputs ({named} uncompressed)"
    require_fits(sum(n for _, n in sizes), what, budget, BUDGET_FIX)


def load_saved(path: str | os.PathLike[str], memory_budget: int | None = None) -> Any:
    """`torch.load(path, weights_only=True)` on the CPU, or :class:`UncomparableError` naming why.

    One-line reasons: no such file, a directory, unreadable, empty, or not a (complete)
    `torch.save` file: truncated, corrupt, or holding objects `weights_only` refuses. A file
    whose declared contents exceed `memory_budget` bytes (None: the memory available now) is
    refused first with `BudgetExceededError`.
    """
    require_inputs_fit([path], memory_budget)
    p = pathlib.Path(path)
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
