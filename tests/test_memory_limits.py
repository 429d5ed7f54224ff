"""Memory budgets read the container's limit and the address-space limit, and say which bound.

Round 3 (issue 35, HIGH 3 and MEDIUM 7): every budget read the host's MemAvailable, so inside a
900 MiB memory cgroup a request the budget admitted was OOM-killed (exit 137, no message), and
low memory under `ulimit -v` was reported as the request's size, a corrupt file or an internal
error. The cgroup files are fake trees under `budget.SYSTEM_ROOT`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fake_cgroup import MIB, fake_cgroup_v2
from prenoise.cli.commands import main
from prenoise.guards import budget
from prenoise.guards.budget import BudgetExceededError, MemoryLimit, require_fits
from waits import READY_CEILING_S

TINY = Path(__file__).parent / "ref2va" / "tiny-recipe.yaml"


def test_cgroup_v2_the_tightest_level_binds_and_is_named(tmp_path: Path) -> None:
    root = fake_cgroup_v2(
        tmp_path,
        {
            "/": ("max", 10 * MIB, 0),  # the root: no limit
            "/machine": (str(900 * MIB), 850 * MIB, 100 * MIB),  # 150 MiB free (cache counts)
            "/machine/job": (str(2048 * MIB), 700 * MIB, 0),  # its own: 1.3 GiB free
        },
    )
    limit = budget.memory_limit(root)
    assert limit == MemoryLimit(
        150 * MIB, "under the cgroup v2 limit (memory.max 900.0 MiB, 750.0 MiB in use)"
    )
    assert limit.described == (
        "the 150.0 MiB of memory available under the cgroup v2 limit "
        "(memory.max 900.0 MiB, 750.0 MiB in use)"
    )


def test_cgroup_v1_and_the_host(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("5:cpu:/\n4:memory:/docker/abc\n0::/\n")
    (tmp_path / "proc/meminfo").write_text("MemAvailable: 4194304 kB\n")  # 4 GiB
    memory = tmp_path / "sys/fs/cgroup/memory"  # the container's own cgroup, no namespace
    memory.mkdir(parents=True)
    (memory / "memory.limit_in_bytes").write_text(str(512 * MIB))
    (memory / "memory.usage_in_bytes").write_text(str(500 * MIB))
    (memory / "memory.stat").write_text(f"total_inactive_file {8 * MIB}\n")
    assert budget.memory_limit(tmp_path) == MemoryLimit(
        20 * MIB, "under the cgroup v1 limit (memory.limit_in_bytes 512.0 MiB, 492.0 MiB in use)"
    )
    (memory / "memory.limit_in_bytes").write_text("9223372036854771712")  # v1's "no limit"
    assert budget.memory_limit(tmp_path) == MemoryLimit(4 * 2**30, "on this host")


def test_a_request_over_the_containers_limit_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fake_cgroup_v2(tmp_path / "root", {"/": (str(900 * MIB), 899 * MIB, 0)})
    monkeypatch.setattr(budget, "SYSTEM_ROOT", root)
    monkeypatch.chdir(tmp_path)
    argv = ["generate", "--recipe", str(TINY), "--out", "clip.mp4", "--quiet"]
    assert main(argv) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert (
        out.startswith("error: this request (model ")
        and (
            "more than the 1.0 MiB of memory available under the cgroup v2 limit "
            "(memory.max 900.0 MiB, 899.0 MiB in use); make the request smaller"
        )
        in out
    ), out
    assert not (tmp_path / "clip.mp4").exists()


def test_require_fits_names_the_binding_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        budget, "memory_limit", lambda: MemoryLimit(MIB, "under the cgroup v2 limit (x)")
    )
    with pytest.raises(BudgetExceededError) as info:
        require_fits(2 * MIB, "a draw", fix="draw less")
    assert str(info.value) == (
        "a draw needs 2.0 MiB, more than the 1.0 MiB of memory available under the cgroup v2 "
        "limit (x); draw less"
    )


# -- low memory (ulimit -v) is reported as such --------------------------------------------------

_COMPARE_UNDER_ULIMIT = """
import resource, sys
from prenoise.cli.commands import main
import torch  # everything compare needs is loaded: then leave 48 MiB of address space
with open("/proc/self/status") as f:
    size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + 48 * 2**20, resource.RLIM_INFINITY))
sys.exit(main(sys.argv[1:]))
"""


def test_compare_under_ulimit_v_names_the_address_space_limit(tmp_path: Path) -> None:
    torch.save({"x": torch.zeros(8 * MIB)}, tmp_path / "a.pt")  # 32 MiB each
    torch.save({"x": torch.ones(8 * MIB)}, tmp_path / "b.pt")
    run = subprocess.run(
        [sys.executable, "-c", _COMPARE_UNDER_ULIMIT, "compare", "a.pt", "b.pt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        env={**os.environ, "COLUMNS": "500"},
    )
    out = run.stdout.strip()
    assert run.returncode == 2 and "\n" not in out, run.stdout + run.stderr
    assert out.startswith("error: loading the inputs (a.pt 32.0 MiB, b.pt 32.0 MiB uncompressed)")
    assert "of memory available under the address-space limit (ulimit -v " in out, out


def test_an_allocation_that_fails_is_out_of_memory_not_an_internal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.save({"x": torch.zeros(4)}, tmp_path / "a.pt")

    def fail(*_args: object, **_kwargs: object) -> object:
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 67108864 bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr(torch, "load", fail)
    monkeypatch.setattr(budget, "memory_limit", lambda: MemoryLimit(3 * MIB, "under LIMIT"))
    assert main(["compare", str(tmp_path / "a.pt"), str(tmp_path / "a.pt")]) == 2
    out = capsys.readouterr().out.strip()
    assert out == (
        "error: out of memory (torch could not allocate a buffer of 64.0 MiB); the 3.0 MiB of "
        "memory available under LIMIT: free memory, raise the limit or ask for less"
    ), out
