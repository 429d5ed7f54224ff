"""In-process pieces: stream assignment, host-shared noise on one rank, status, shm, SP math."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from progress_lines import torchrun_stages

from prenoise.distributed.host_noise import HostSharedNoise, assign_streams, draw_into, plan_jobs
from prenoise.distributed.sequence_parallel import (
    SequenceParallelTransformer,
    gather_rows,
    shard_rows,
)
from prenoise.distributed.shm import (
    create_segment,
    leftover_segments,
    map_segment,
    segment_path,
    sweep_stale_segments,
    unlink_segment,
)
from prenoise.distributed.status import (
    RankFailedError,
    RankTimeoutError,
    StatusBoard,
)
from prenoise.observe.tracing import NULL_TRACER
from prenoise.preparation.draws import run_stream
from prenoise.ref2va.config import RecipeError, load_recipe, recipe_from_dict
from prenoise.ref2va.geometry import RequestGeometry
from prenoise.ref2va.noise import (
    OutputDraws,
    condition_streams,
    draw_condition_noise,
    initial_noise_streams,
    output_draws,
)
from prenoise.ref2va.transformer import JointTransformer, TransformerConfig
from prenoise.verify import tensor_sha256
from waits import READY_CEILING_S

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"
GEO = RequestGeometry.from_frames(22, 128, 64)
SHAPES = [(1, 4, 8), (3, 4, 8)]  # an image and a short video reference


def draws(seed: int, shapes: list) -> OutputDraws:
    """Output 0's streams at `GEO` for condition shapes `shapes`, native stream."""
    return output_draws(0, seed, GEO.T, GEO.h, GEO.w, GEO.audio_t, shapes)


def board(store: dist.Store, rank: int, world: int = 2) -> StatusBoard:
    return StatusBoard(store, "prenoise/test", world, rank)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def test_assign_streams_is_largest_first_least_loaded() -> None:
    assert assign_streams([10, 1, 11], 2) == [1, 1, 0]
    assert assign_streams([10, 1, 11], 4) == [1, 2, 0]
    assert assign_streams([5, 5], 1) == [0, 0]


def test_plan_jobs_places_conditions_back_to_back() -> None:
    jobs, fields = plan_jobs(draws(42, SHAPES), 2)
    cond = [j for j in jobs if j.field == "visual_condition_noise"]
    assert [j.offset for j in cond] == [0, 1 * 2 * 4 * 96 * 4]
    assert fields["visual_condition_noise"] == (1 * 2 * 4 + 3 * 2 * 4, 96)
    assert fields["initial_video_noise"] == (GEO.T * GEO.h // 2 * GEO.w // 2, 96)


def test_draw_into_equals_run_stream() -> None:
    video, audio = initial_noise_streams(7, GEO.T, GEO.h, GEO.w, GEO.audio_t)
    for stream in (video, audio, *condition_streams(7, GEO.T, SHAPES)):
        expected = run_stream(stream)[stream.name]
        out = torch.full_like(expected, float("nan"))
        draw_into(stream, out)
        assert torch.equal(bits(out), bits(expected))


@pytest.mark.parametrize("predicted", [SHAPES, [(1, 4, 8), (2, 4, 8)]])
def test_host_shared_noise_on_one_rank_equals_serial_draws(predicted: list) -> None:
    before = set(leftover_segments())
    store = dist.HashStore()
    provider = HostSharedNoise(board(store, 0, 1), [0], 0, "unit", 10.0)
    try:
        provider.start(draws(42, predicted))
        noise = provider(draws(42, SHAPES), NULL_TRACER)
    finally:
        provider.close()
    video, audio = initial_noise_streams(42, GEO.T, GEO.h, GEO.w, GEO.audio_t)
    expected_cond = draw_condition_noise(42, GEO.T, SHAPES)
    assert expected_cond is not None and noise.visual_condition_noise is not None
    assert torch.equal(bits(noise.initial_video_noise), bits(run_stream(video)[video.name]))
    assert torch.equal(bits(noise.initial_audio_noise), bits(run_stream(audio)[audio.name]))
    assert torch.equal(bits(noise.visual_condition_noise), bits(expected_cond))
    assert noise.initial_video_noise.storage_offset() == 0
    assert "/prenoise-" in (noise.initial_video_noise.untyped_storage().filename or "")
    assert set(leftover_segments()) <= before  # mapped, but the names are gone
    assert provider.fallbacks == (
        [] if predicted == SHAPES else [f"seed 42: predicted {predicted}, encoded {SHAPES}"]
    )


def test_status_board_relays_the_original_error_text() -> None:
    store = dist.HashStore()
    b0, b1 = board(store, 0), board(store, 1)
    b1.post_error("draw", ValueError("bad shape (3, 4)"))
    with pytest.raises(RankFailedError, match=r"^rank 1 failed in draw: ValueError: bad shape"):
        b0.wait("drawn", [0, 1], 5.0)


def test_status_board_times_out_naming_the_missing_rank() -> None:
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=5))
    b0 = board(store, 0)
    b0.post_ok("drawn")
    with pytest.raises(RankTimeoutError, match=r"rank\(s\) \[1\] did not finish 'drawn' within"):
        b0.wait("drawn", [0, 1], 0.2)
    board(store, 1).post_ok("drawn")
    b0.wait("drawn", [0, 1], 0.2)


def test_segments_are_mapped_shared_and_stale_ones_swept() -> None:
    path = segment_path(1 << 22, "unit-test")  # pid 4194304: above the default pid_max
    create_segment(path, 64)
    a, b = map_segment(path, 64), map_segment(path, 64)
    a.tensor(0, (16,))[:] = 3.0
    assert torch.equal(b.tensor(0, (16,)), torch.full((16,), 3.0))
    assert path in sweep_stale_segments()
    assert not path.exists() and not unlink_segment(path)
    assert torch.equal(a.tensor(0, (16,)), torch.full((16,), 3.0))  # mapping outlives the name


def test_sequence_parallel_forward_on_one_rank_is_the_model_bitwise() -> None:
    model = JointTransformer.build(TransformerConfig(dim=32, num_layers=2, num_heads=2), 16)
    g = torch.Generator().manual_seed(0)
    video, audio = torch.randn(50, 96, generator=g), torch.randn(18, 32, generator=g)
    text, cond_rows = torch.randn(5, 16, generator=g), torch.randn(12, 96, generator=g)
    sp = SequenceParallelTransformer(model)
    summary = model.summarize_conditions(cond_rows, None)
    assert torch.equal(sp.summarize_conditions(cond_rows, None), summary)
    expected = model(video, audio, text, 0.7, 0.3, condition=summary)
    got = sp.forward(video, audio, text, torch.tensor(0.7), torch.tensor(0.3), summary)
    assert all(torch.equal(bits(a), bits(b)) for a, b in zip(got, expected, strict=True))


def test_shards_cover_rows_contiguously() -> None:
    for total in (0, 1, 7, 1206):
        shards = [shard_rows(total, r, 4) for r in range(4)]
        assert shards[0].start == 0 and shards[-1].stop == total
        assert all(a.stop == b.start for a, b in itertools.pairwise(shards))
    rows = torch.arange(12.0).view(6, 2)
    assert gather_rows(rows, shard_rows(6, 0, 1), 1, None) is rows


def test_recipe_parallel_section() -> None:
    recipe = load_recipe(TINY)
    assert recipe.parallel is None
    data = {**recipe.model_dump(mode="json"), "parallel": {"ranks": 2, "timeout_s": 9}}
    parsed = recipe_from_dict(data).parallel
    assert parsed is not None and parsed.ranks == 2 and parsed.host_shared_noise
    with pytest.raises(RecipeError, match="unknown key 'rank' in parallel"):
        recipe_from_dict({**data, "parallel": {"rank": 2}})


def test_torchrun_verify_two_ranks(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    report = tmp_path / "verify.json"
    proc = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "prenoise",
            "verify",
            "--recipe",
            str(TINY),
            "--json",
            str(report),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "bitwise equal: 9 fields on all 2 ranks (host-shared noise) = single process" in (
        proc.stdout.replace("\n", " ")
    )
    # progress (issue 34): rank 0's stages once each, in order, on stderr (the ranks prepare
    # overlapped, rank 0 then prepares the single-process serial reference); rank 1 is silent
    assert torchrun_stages(proc.stderr, "verify") == [
        "load models",
        "prepare: overlapped arm",
        "prepare: serial arm",
        "compare",
    ]
    assert "[prenoise " not in proc.stdout
    data = json.loads(report.read_text())
    assert data["equal"] and data["differences"] == [] and data["rng_state_unchanged"] == [True] * 2
    video = data["fields"]["initial_video_noise"]
    geo = load_recipe(TINY).geometry()
    assert video["shape"] == [geo.T * geo.h // 2 * geo.w // 2, 96]
    expected = initial_noise_streams(42, geo.T, geo.h, geo.w, geo.audio_t)[0]
    assert video["sha256"] == tensor_sha256(run_stream(expected)[expected.name])
