"""A restarted `prenoise serve` leaves no orphans in its output directory (issue 35, MEDIUM 8).

Round 3 killed services and writers: partial MP4s left by `kill -9` stayed for ever, and after
a restart the finished MP4s stayed on disk while the API answered 404 for them. A service now
sweeps, when it starts, what no job of it can own (job outputs, dead writers' temporaries, the
upload folder), and holds its output directory so a second service cannot sweep the first's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from serve_helpers import StartServer, submit, wait_for

from prenoise.guards.usage import UsageError
from prenoise.serve import ServeSettings, create_app


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_a_restart_sweeps_what_it_no_longer_knows(
    start_server: StartServer, tmp_path: Path
) -> None:
    out = tmp_path / "shared-out"
    first = start_server(output_dir=out)
    with first.client() as client:
        job = submit(client, {"seed": 1})
        assert wait_for(client, job)["state"] == "done"
    first.stop()
    assert (out / f"{job}.mp4").is_file()
    orphan = out / f".{'ab' * 16}.mp4.{_dead_pid()}-0123abcd.partial.mp4"  # a kill -9 mid-write
    orphan.write_bytes(b"\0" * 64)
    keep = [out / "notes.txt", out / f"{job}.mp4.bak", out / "clip.mp4"]  # not a job's name
    for path in keep:
        path.write_bytes(b"x")

    second = start_server(output_dir=out)
    with second.client() as client:
        assert client.get(f"/v1/videos/{job}").status_code == 404
        assert client.get(f"/v1/videos/{job}/content").status_code == 404
    left = sorted(p.name for p in out.iterdir())
    assert left == sorted(p.name for p in keep), left
    assert sorted(p.name for p in second.service.swept) == sorted([f"{job}.mp4", orphan.name])


def test_two_services_cannot_share_an_output_directory(
    start_server: StartServer, recipe: object, pipeline: object, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    start_server(output_dir=out)
    with pytest.raises(UsageError) as info:
        create_app(ServeSettings(recipe=recipe, output_dir=out), pipeline)  # type: ignore[arg-type]
    assert str(info.value) == (
        f"output directory {out}: another prenoise serve uses it; give each service its own "
        "--output-dir"
    )
