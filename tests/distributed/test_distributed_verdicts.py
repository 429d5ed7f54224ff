"""The distributed verdict says "not equal" (and `torchrun … verify` exits 1) when a rank is
broken, and the host-shared draws are proven to overlap: on the draw thread, started before
the request thread asked for them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from waits import READY_CEILING_S

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"


def test_distributed_verify_reports_each_broken_rank(shared_ranks: Any) -> None:
    """`verify_with_a_broken_rank`, run in the shared 2-rank job (`conftest.py`)."""
    r0, r1 = (dict(value) for value in shared_ranks.values("verify_with_a_broken_rank"))
    overlap = [r0.pop("overlap"), r1.pop("overlap")]
    assert r0 == r1  # the verdict is broadcast: every rank agrees

    clean = r0["clean"]
    assert clean["equal"] and clean["differences"] == [], clean["summary"]
    assert clean["rng_state_unchanged"] == [True, True]

    # rank 1's host-shared video draw is off by one bit: every rank maps the same wrong copy,
    # so the ranks agree with each other and only the single-process reference sees it
    shared = r0["shared_bit"]
    assert not shared["equal"] and shared["summary"].startswith("DIFFERENT (host-shared noise)")
    assert len(shared["differences"]) >= 1
    assert all(d.startswith("rank 0 vs single process: ") for d in shared["differences"])
    assert any("initial_video_noise differs" in d for d in shared["differences"])

    # per-rank mode: rank 1's own draw differs from rank 0's (values, strides, dtype or shape)
    for scenario, field in (
        ("rank1_bit", "initial_video_noise"),
        ("rank1_stride", "initial_audio_noise"),
        ("rank1_dtype", "initial_audio_noise"),
        ("rank1_shape", "initial_audio_noise"),
    ):
        verdict = r0[scenario]
        assert not verdict["equal"], scenario
        assert verdict["summary"].startswith("DIFFERENT (per-rank noise)"), verdict["summary"]
        assert f"rank 1 vs rank 0: {field} differs" in " ".join(verdict["differences"]), scenario
        assert verdict["rng_state_unchanged"] == [True, True]

    rng = r0["rank1_global_rng"]
    assert not rng["equal"] and rng["differences"] == []
    assert rng["rng_state_unchanged"] == [True, False]

    # the clean run overlapped: each rank drew its share of the three streams on its draw
    # thread, each draw started before the request thread asked for the shared noise
    drawn = [[name for name, _, _ in r["drawn"]] for r in overlap]
    assert sorted(drawn[0] + drawn[1]) == sorted(
        ["visual_condition_noise.0", "initial_video_noise", "initial_audio_noise"]
    )
    assert drawn[0] and drawn[1]
    for r in overlap:
        ((asker, asked_at),) = r["asked"]
        assert asker == "MainThread"
        for name, thread, start in r["drawn"]:
            assert thread == "host-noise-42", (name, thread)
            assert start < asked_at, (name, "drawn only once asked for")


def test_torchrun_verify_exits_1_when_a_rank_draws_one_wrong_bit(tmp_path: Path) -> None:
    script = tmp_path / "broken_verify.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, torch
            from prenoise.distributed import host_noise
            from prenoise.cli.commands import main

            real = host_noise.draw_into

            def draw_into(stream, out):
                real(stream, out)
                out.view(-1).view(torch.int32)[0] ^= 1

            if os.environ["RANK"] == "1":
                host_noise.draw_into = draw_into
            sys.exit(main(["verify", "--recipe", {str(TINY)!r}, "--json", "v.json", "--quiet"]))
            """
        )
    )
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node=2", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = " ".join(proc.stdout.split())
    assert "DIFFERENT (host-shared noise): rank 0 vs single process:" in out
    # --quiet: no progress on any rank, the verdict as without it
    assert "[prenoise " not in proc.stderr + proc.stdout

    report = json.loads((tmp_path / "v.json").read_text())
    assert report["equal"] is False and report["rng_state_unchanged"] == [True, True]
