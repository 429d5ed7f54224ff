"""A fake `/proc/self/cgroup` and cgroup v2 tree for the memory-budget tests
(`prenoise.guards.budget.SYSTEM_ROOT` points at it)."""

from __future__ import annotations

from pathlib import Path

MIB = 2**20


def fake_cgroup_v2(root: Path, levels: dict[str, tuple[str, int, int]]) -> Path:
    """A `/proc/self/cgroup` naming the deepest level, and each level's memory.max,
    memory.current and memory.stat's inactive_file."""
    deepest = max(levels, key=len)
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(f"0::{deepest}\n")
    (root / "proc/meminfo").write_text(f"MemTotal: 1 kB\nMemAvailable: {64 * 2**20} kB\n")
    for path, (limit, current, inactive) in levels.items():
        level = root / "sys/fs/cgroup" / path.lstrip("/")
        level.mkdir(parents=True, exist_ok=True)
        (level / "memory.max").write_text(f"{limit}\n")
        (level / "memory.current").write_text(f"{current}\n")
        (level / "memory.stat").write_text(f"anon 1\ninactive_file {inactive}\nactive_file 5\n")
    return root
