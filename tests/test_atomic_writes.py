"""Every file prenoise writes is written whole or not at all (`prenoise.guards.atomic`).

Round 3 (issue 35, HIGH 4): `--json` reports were written in place, so a full disk or a kill
mid-write left truncated JSON and the previous report at that path was already gone. The CLI
test makes the kernel refuse the write for real (`RLIMIT_FSIZE`: a write past the limit fails
with EFBIG, as a full disk fails with ENOSPC).
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from prenoise.guards.atomic import (
    OutputWriteError,
    atomic_output,
    is_partial,
    sweep_partials,
    write_atomic,
)
from waits import READY_CEILING_S

PREVIOUS = '{"previous": "report"}\n'


def _limit_file_size() -> None:  # in the child: writes past 4 KiB fail (EFBIG), no SIGXFSZ
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_compare_json_on_a_refusing_disk_keeps_the_previous_report(tmp_path: Path) -> None:
    # 400 differing fields: the report is ~60 KB, far past the 4 KiB the kernel lets it write.
    torch.save({f"field{i}": torch.zeros(3) for i in range(400)}, tmp_path / "a.pt")
    torch.save({f"field{i}": torch.ones(3) for i in range(400)}, tmp_path / "b.pt")
    report = tmp_path / "report.json"
    report.write_text(PREVIOUS)
    code = "import sys; from prenoise.cli.commands import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run(
        [sys.executable, "-c", code, "compare", "a.pt", "b.pt", "--json", "report.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        preexec_fn=_limit_file_size,
        env={**os.environ, "COLUMNS": "400"},
    )
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 2, run.stdout + run.stderr
    assert lines == [
        "error: --json report.json: cannot write it (file too large); "
        "the previous file is unchanged"
    ], lines
    assert report.read_text() == PREVIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.pt", "report.json"]


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text(PREVIOUS)

    def half_then_fail(tmp: Path) -> None:
        tmp.write_text('{"trunc')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OutputWriteError) as caught:
        write_atomic(target, half_then_fail, what="--json")
    assert str(caught.value) == (
        f"--json {target}: cannot write it (no space left on device); "
        "the previous file is unchanged"
    )
    assert target.read_text() == PREVIOUS
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_write_interrupted_by_ctrl_c_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "new.mp4"
    with pytest.raises(KeyboardInterrupt), atomic_output(target) as tmp:
        assert tmp.parent == tmp_path and is_partial(tmp.name) and tmp.suffix == ".mp4"
        tmp.write_bytes(b"\0" * 100)
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_complete_write_replaces_keeping_mode_and_following_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text(PREVIOUS)
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, json.dumps({"new": 1}))
    assert link.is_symlink() and json.loads(real.read_text()) == {"new": 1}
    assert real.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_sweep_removes_dead_writers_partials_only(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    orphan = tmp_path / f".clip.mp4.{dead_pid}-0123abcd.partial.mp4"
    live = tmp_path / f".clip2.mp4.{os.getppid()}-0123abcd.partial.mp4"
    mine = tmp_path / f".clip3.mp4.{os.getpid()}-0123abcd.partial.mp4"
    keep = tmp_path / "clip.mp4"
    for p in (orphan, live, mine, keep):
        p.write_bytes(b"x")
    assert sweep_partials(tmp_path) == [orphan]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (live, mine, keep))


def test_the_next_write_of_a_file_removes_a_dead_writers_temporary(tmp_path: Path) -> None:
    # issue 35, MEDIUM 8: `kill -9` during `prenoise generate --out clip.mp4` left this for ever
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    orphan = tmp_path / f".clip.mp4.{int(dead.stdout)}-0123abcd.partial.mp4"
    live = tmp_path / f".clip.mp4.{os.getppid()}-0123abcd.partial.mp4"
    other = tmp_path / f".other.mp4.{int(dead.stdout)}-0123abcd.partial.mp4"
    for path in (orphan, live, other):
        path.write_bytes(b"\0")
    write_atomic(tmp_path / "clip.mp4", b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["clip.mp4", live.name, other.name])
