"""Memory budgets: refuse work whose allocation cannot fit, before allocating anything.

A budget is a number of bytes; None means "the memory available right now", which is the least
of three limits, and the refusal names the one that binds (:func:`memory_limit`):

- the host: MemAvailable (psutil when installed, else `/proc/meminfo`, else `sysconf`);
- the process's memory cgroup, v2 (`memory.max` minus `memory.current`) or v1
  (`memory.limit_in_bytes` minus `memory.usage_in_bytes`), at its own level and every level
  above it; reclaimable page cache (`inactive_file` of `memory.stat`) counts as free, as the
  kernel reclaims it before it OOM-kills. A container's limit is the one that kills it, so a
  budget read from the host alone admits work the container cannot hold;
- the address-space limit (`RLIMIT_AS`, `ulimit -v`) less the address space in use (`VmSize`).

The cgroup files are read under `SYSTEM_ROOT` (`/`; tests point it at a fake tree).
`require_fits` compares an estimate with a budget and raises `BudgetExceededError`, a one-line
`ValueError` that says how much was needed, how much there is under which limit, and what to
change.
"""

from __future__ import annotations

import errno
import os
import re
import resource
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SYSTEM_ROOT",
    "BudgetExceededError",
    "MemoryLimit",
    "allocation_failure",
    "available_memory_bytes",
    "format_bytes",
    "memory_limit",
    "memory_limits",
    "require_fits",
    "resolve_budget",
]


class BudgetExceededError(ValueError):
    """Work would allocate more memory than its budget allows; nothing was allocated."""


def available_memory_bytes() -> int:
    """Bytes of memory a new allocation can get now (the least of every limit that applies)."""
    return memory_limit().available


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


SYSTEM_ROOT = Path("/")
"""Where `proc/self/cgroup` and `sys/fs/cgroup` are read (tests use a fake tree)."""

_UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a page-rounded 2^63 - 1


@dataclass(frozen=True)
class MemoryLimit:
    """The bytes a new allocation can still get under one limit, and what that limit is."""

    available: int
    """Bytes free under this limit (never negative)."""
    source: str
    """Where, in words: `on this host`, `under the cgroup v2 limit (memory.max 900.0 MiB, 850.0
    MiB in use)`, `under the address-space limit (ulimit -v ...)`."""

    @property
    def described(self) -> str:
        """`the 50.0 MiB of memory available <source>`."""
        return f"the {format_bytes(self.available)} of memory available {self.source}"


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _stat_value(path: Path, *keys: str) -> int:
    """The first of `keys` in a cgroup `memory.stat` (0 when absent)."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return 0
    values = dict(line.split(maxsplit=1) for line in lines if " " in line)
    for key in keys:
        try:
            return int(values[key])
        except (KeyError, ValueError):
            continue
    return 0


def _cgroup_paths(root: Path) -> dict[str, str]:
    """`{"v2": path, "v1": path}` of this process's cgroups (`/proc/self/cgroup`)."""
    found: dict[str, str] = {}
    try:
        lines = (root / "proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return found
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            found["v2"] = parts[2]
        elif "memory" in parts[1].split(","):
            found["v1"] = parts[2]
    return found


def _levels(mount: Path, cgroup: str) -> list[Path]:
    """The cgroup's directory and every one above it up to the mount; just the mount when the
    path is not visible (a container without a cgroup namespace sees its own cgroup there)."""
    own = mount / cgroup.lstrip("/")
    if not own.is_dir() or mount not in (own, *own.parents):
        return [mount]
    levels = [own]
    while levels[-1] != mount:
        levels.append(levels[-1].parent)
    return levels


def _cgroup_limits(root: Path) -> list[MemoryLimit]:
    found: list[MemoryLimit] = []
    paths = _cgroup_paths(root)
    files = {
        "v2": ("memory.max", "memory.current", ("inactive_file",)),
        "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes", ("total_inactive_file",)),
    }
    mounts = {
        "v2": [root / "sys/fs/cgroup", root / "sys/fs/cgroup/unified"],
        "v1": [root / "sys/fs/cgroup/memory"],
    }
    for version, cgroup in paths.items():
        limit_file, usage_file, reclaimable = files[version]
        for mount in mounts[version]:
            if not mount.is_dir():
                continue
            for level in _levels(mount, cgroup):
                limit = _read_int(level / limit_file)
                usage = _read_int(level / usage_file)
                if limit is None or limit >= _UNLIMITED or usage is None:
                    continue
                used = max(0, usage - _stat_value(level / "memory.stat", *reclaimable))
                source = (
                    f"under the cgroup {version} limit ({limit_file} {format_bytes(limit)}, "
                    f"{format_bytes(used)} in use)"
                )
                found.append(MemoryLimit(max(0, limit - used), source))
    return found


def _host_limit(root: Path) -> MemoryLimit:
    if root == Path("/"):
        try:
            import psutil

            return MemoryLimit(int(psutil.virtual_memory().available), "on this host")
        except Exception:  # not installed, or no memory left to import it: read /proc
            pass
    try:
        with open(root / "proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return MemoryLimit(int(line.split()[1]) * 1024, "on this host")
    except (OSError, ValueError, IndexError):
        pass
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return MemoryLimit(free, "on this host (free pages)")
    except (OSError, ValueError, AttributeError):
        return MemoryLimit(2**63 - 1, "(no limit known)")  # nothing to ask: never refuse a guess


def _address_space_limit() -> MemoryLimit | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    in_use = 0
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    in_use = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    source = (
        f"under the address-space limit (ulimit -v {format_bytes(soft)}, "
        f"{format_bytes(in_use)} in use)"
    )
    return MemoryLimit(max(0, soft - in_use), source)


def memory_limits(root: Path | None = None) -> list[MemoryLimit]:
    """Every limit that applies to this process now: the host's, its cgroup levels', its
    address-space limit's."""
    base = SYSTEM_ROOT if root is None else root
    limits = [_host_limit(base)]
    for read in (_cgroup_limits, lambda _: [_address_space_limit()]):
        try:
            limits.extend(limit for limit in read(base) if limit is not None)
        except Exception:  # an unreadable limit is no limit: the others still apply
            continue
    return limits


def memory_limit(root: Path | None = None) -> MemoryLimit:
    """The limit with the least memory free: what a new allocation can really get."""
    return min(memory_limits(root), key=lambda limit: limit.available)


def resolve_budget(budget: int | None) -> tuple[int, str]:
    """`(bytes, description)` of a budget: the given value, or the memory available now."""
    if budget is not None:
        return int(budget), f"the memory budget of {format_bytes(budget)}"
    limit = memory_limit()
    return limit.available, limit.described


def require_fits(nbytes: int, what: str, budget: int | None = None, fix: str = "") -> None:
    """Raise `BudgetExceededError` when `nbytes` exceeds `budget` (None: memory available now).

    The message reads ``{what} needs {size}, more than {budget}[; {fix}]``.
    """
    limit, described = resolve_budget(budget)
    if nbytes > limit:
        message = f"{what} needs {format_bytes(nbytes)}, more than {described}"
        raise BudgetExceededError(f"{message}; {fix}" if fix else message)


def allocation_failure(error: BaseException) -> str | None:
    """One line for an allocation that failed (`MemoryError`, torch's CPU allocator, `ENOMEM`),
    naming the limit that binds now (`ulimit -v`, the cgroup, the host); None for any other
    error. Low memory is the environment's state, not a bug and not the request's size."""
    text = " ".join(str(error).split())
    if isinstance(error, MemoryError):
        detail = f"MemoryError: {text}" if text else "MemoryError"
    elif isinstance(error, RuntimeError) and "can't allocate memory" in text:
        asked = re.search(r"tried to allocate (\d+) bytes", text)
        wanted = f" of {format_bytes(int(asked.group(1)))}" if asked else ""
        detail = f"torch could not allocate a buffer{wanted}"
    elif isinstance(error, OSError) and error.errno == errno.ENOMEM:
        detail = text[:200]
    elif isinstance(error, ImportError) and "failed to map segment" in text:
        detail = f"a library could not be loaded: {text[:200]}"  # no address space left for it
    elif isinstance(error, OSError) and error.errno == errno.EAGAIN and _nearly_exhausted():
        detail = text[:300]  # threads or memory refused, and a limit is nearly reached
    else:
        return None
    try:
        where = memory_limit().described
    except Exception:  # reading the limits needs little, but it must not hide the first error
        where = "the memory available now could not be read"
    return f"out of memory ({detail}); {where}: free memory, raise the limit or ask for less"


def _nearly_exhausted() -> bool:
    """Whether a limit other than the host's (`ulimit -v`, a cgroup) has under 64 MiB left."""
    limit = memory_limit()
    return limit.source != "on this host" and limit.available < 64 * 2**20
