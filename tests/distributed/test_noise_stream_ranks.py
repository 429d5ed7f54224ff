"""Multi-rank runs draw the recipe's noise stream on every rank, host-shared draws included.

`torchrun … generate --noise-stream libm` used to exit 0 with an MP4 byte-identical to the
native stream: the host-shared draws never read `noise_stream`. Now every noise source is
handed the planned streams, in the recipe's noise stream, on each call (`NoiseSource`), and the
bytes equal the single-process run in that stream.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from progress_lines import torchrun_stages

from prenoise.cli.commands import main
from prenoise.distributed.host_noise import HostSharedNoise, draw_into, plan_jobs
from prenoise.distributed.status import StatusBoard
from prenoise.observe.tracing import NULL_TRACER
from prenoise.preparation.draws import run_stream
from prenoise.ref2va.geometry import RequestGeometry
from prenoise.ref2va.noise import (
    OutputDraws,
    condition_streams,
    draw_condition_noise,
    initial_noise_streams,
    output_draws,
)
from waits import READY_CEILING_S

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"
GEO = RequestGeometry.from_frames(22, 128, 64)
SHAPES = [(1, 4, 8), (3, 4, 8)]


def draws(seed: int, shapes: list, noise_stream: str) -> OutputDraws:
    """Output 0's streams at `GEO` for condition shapes `shapes`, in `noise_stream`."""
    return output_draws(
        0, seed, GEO.T, GEO.h, GEO.w, GEO.audio_t, shapes, noise_stream=noise_stream
    )


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def test_draw_into_draws_the_streams_own_noise_stream() -> None:
    video, audio = initial_noise_streams(7, GEO.T, GEO.h, GEO.w, GEO.audio_t, noise_stream="libm")
    for stream in (video, audio, *condition_streams(7, GEO.T, SHAPES, noise_stream="libm")):
        expected = run_stream(stream)[stream.name]
        native = run_stream(dataclasses.replace(stream, noise_stream=None))[stream.name]
        out = torch.full_like(expected, float("nan"))
        draw_into(stream, out)
        assert torch.equal(bits(out), bits(expected))
        assert not torch.equal(bits(expected), bits(native))  # libm is not this host's stream


def test_plan_jobs_carry_the_stream() -> None:
    jobs, _ = plan_jobs(draws(42, SHAPES, "libm"), 2)
    assert {job.stream.noise_stream for job in jobs} == {"libm"}


@pytest.mark.parametrize("predicted", [SHAPES, [(1, 4, 8), (2, 4, 8)]])
def test_host_shared_noise_draws_the_stream_it_is_handed(predicted: list) -> None:
    store = dist.HashStore()
    board = StatusBoard(store, "unit", 1, 0)
    provider = HostSharedNoise(board, [0], 0, "unit", 10.0)
    try:
        provider.start(draws(42, predicted, "libm"))
        noise = provider(draws(42, SHAPES, "libm"), NULL_TRACER)
    finally:
        provider.close()
    video, audio = initial_noise_streams(42, GEO.T, GEO.h, GEO.w, GEO.audio_t, noise_stream="libm")
    cond = draw_condition_noise(42, GEO.T, SHAPES, noise_stream="libm")
    assert cond is not None and noise.visual_condition_noise is not None
    assert torch.equal(bits(noise.initial_video_noise), bits(run_stream(video)[video.name]))
    assert torch.equal(bits(noise.initial_audio_noise), bits(run_stream(audio)[audio.name]))
    assert torch.equal(bits(noise.visual_condition_noise), bits(cond))


def test_a_batch_started_in_another_stream_is_refused() -> None:
    provider = HostSharedNoise(StatusBoard(dist.HashStore(), "u", 1, 0), [0], 0, "u", 10.0)
    try:
        provider.start(draws(42, SHAPES, "native"))
        with pytest.raises(RuntimeError, match="started in noise stream 'native'"):
            provider(draws(42, SHAPES, "libm"), NULL_TRACER)
    finally:
        provider.close()


@pytest.mark.slow
def test_torchrun_generate_in_libm_equals_the_single_process_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host-shared draws (the default); both modes' preparations are compared with the single
    process in tests/test_option_paths.py (a recipe with `parallel:` was refused a stream)."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY.read_text())
    monkeypatch.chdir(tmp_path)
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node=2", "-m", "prenoise", "generate",
         "--recipe", str(recipe), "--noise-stream", "libm", "--out", "ranks.mp4"],
        cwd=tmp_path, capture_output=True, text=True, timeout=READY_CEILING_S, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # progress (issue 34): the single process's stages, rank 0's only, denoise steps counted
    assert torchrun_stages(proc.stderr, "generate") == [
        "load models",
        "prepare",
        "denoise output 0 (2 steps)",
        "decode output 0",
    ]
    base = ["generate", "--recipe", str(recipe), "--out"]
    assert main([*base, "single.mp4", "--noise-stream", "libm"]) == 0
    assert main([*base, "native.mp4"]) == 0
    ranks, single = (tmp_path / "ranks.mp4").read_bytes(), (tmp_path / "single.mp4").read_bytes()
    assert ranks == single
    assert ranks != (tmp_path / "native.mp4").read_bytes()
