"""Memory budgets: refuse work whose allocation cannot fit, before allocating anything.

A budget is a number of bytes; None means "the memory available right now"
(`available_memory_bytes`: psutil when installed, else `/proc/meminfo` MemAvailable, else
`sysconf` free pages). `require_fits` compares an estimate with a budget and raises
`BudgetExceededError`, a one-line `ValueError` that says how much was needed, how much there is,
and what to change.
"""

from __future__ import annotations

import os

__all__ = [
    "BudgetExceededError",
    "available_memory_bytes",
    "format_bytes",
    "require_fits",
    "resolve_budget",
]


class BudgetExceededError(ValueError):
    """Work would allocate more memory than its budget allows; nothing was allocated."""


def available_memory_bytes() -> int:
    """Bytes of memory a new allocation can get now without swapping (best estimate)."""
    try:
        import psutil
    except ImportError:
        pass
    else:
        return int(psutil.virtual_memory().available)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return 2**63 - 1  # nothing to ask: do not refuse on a guess


def format_bytes(nbytes: int | float) -> str:
    """`nbytes` in binary units with one decimal (`1.5 GiB`); huge values in scientific form."""
    if abs(nbytes) >= 2**1000:  # beyond float range: say the order of magnitude
        return f"about 1e{len(str(abs(int(nbytes)))) - 1} B"
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            break
        value /= 1024
    if unit == "PiB" and value >= 1024:
        return f"{value:.2e} PiB"
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"


def resolve_budget(budget: int | None) -> tuple[int, str]:
    """`(bytes, description)` of a budget: the given value, or the memory available now."""
    if budget is not None:
        return int(budget), f"the memory budget of {format_bytes(budget)}"
    available = available_memory_bytes()
    return available, f"the {format_bytes(available)} of memory available"


def require_fits(nbytes: int, what: str, budget: int | None = None, fix: str = "") -> None:
    """Raise `BudgetExceededError` when `nbytes` exceeds `budget` (None: memory available now).

    The message reads ``{what} needs {size}, more than {budget}[; {fix}]``.
    """
    limit, described = resolve_budget(budget)
    if nbytes > limit:
        message = f"{what} needs {format_bytes(nbytes)}, more than {described}"
        raise BudgetExceededError(f"{message}; {fix}" if fix else message)
