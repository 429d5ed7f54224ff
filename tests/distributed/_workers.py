"""Rank functions for the spawned 2-rank tests (importable by the spawned children)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from prenoise.distributed import host_noise
from prenoise.distributed.group import init_distributed
from prenoise.distributed.request import broadcast_request
from prenoise.distributed.runner import DistributedRef2VA
from prenoise.distributed.shm import leftover_segments
from prenoise.distributed.status import describe_error
from prenoise.distributed.verification import field_digests
from prenoise.ref2va.config import ParallelConfig, load_recipe
from prenoise.ref2va.models import Ref2VAModels


def _setup(recipe_path: str, workdir: str, timeout_s: float) -> tuple[Any, Any, Any]:
    torch.set_num_threads(1)
    os.chdir(workdir)
    recipe = load_recipe(recipe_path)
    ctx = init_distributed(timeout_s)
    models = Ref2VAModels.default(recipe.model)
    runner = DistributedRef2VA(ctx, models, ParallelConfig(timeout_s=timeout_s))
    request = broadcast_request(ctx, recipe if ctx.rank == 0 else None, models)
    return ctx, runner, request


def prepare_both_modes_and_denoise(recipe_path: str, workdir: str) -> dict[str, Any]:
    """Per-rank and host-shared digests, then a sequence-parallel denoise of the shared inputs."""
    ctx, runner, request = _setup(recipe_path, workdir, 60.0)
    per_rank = runner.prepare(request, keep_noise=True, host_shared=False)
    per_rank_digests = field_digests(per_rank.outputs)
    del per_rank
    shared = runner.prepare(request, keep_noise=True, host_shared=True)
    shared_digests = field_digests(shared.outputs)
    noise = shared.outputs[0].noise
    assert noise is not None
    # the shared fields are file mappings, not private copies
    mapped = [
        noise.initial_video_noise.untyped_storage().filename,
        noise.initial_audio_noise.untyped_storage().filename,
    ]
    leftovers_after_prepare = [str(p) for p in leftover_segments()]
    video, audio = runner.denoise(request.recipe(), shared.outputs[0])
    return {
        "rank": ctx.rank,
        "per_rank": per_rank_digests,
        "shared": shared_digests,
        "mapped": mapped,
        "used_prepared_noise": shared.outputs[0].used_prepared_noise,
        "leftovers": leftovers_after_prepare,
        "video": video,
        "audio": audio,
    }


def fail_hang_die_in_draw(recipe_path: str, workdir: str, timeout_s: float) -> dict[str, Any]:
    """Three requests: rank 1's draw raises, then sleeps past the timeout, then kills rank 1.

    Returns, per scenario, this rank's error text, seconds to fail and leftover segment names.
    """
    ctx, runner, request = _setup(recipe_path, workdir, timeout_s)
    original = host_noise.draw_into
    results: dict[str, Any] = {}
    for how in ("fail", "hang", "die"):

        def broken(stream: Any, out: torch.Tensor, how: str = how) -> None:
            if how == "fail":
                raise RuntimeError(f"injected draw failure in {stream.name} on rank 1")
            if how == "die":
                os._exit(17)
            time.sleep(120)
            original(stream, out)

        if ctx.rank == 1:
            host_noise.draw_into = broken  # type: ignore[assignment]
        ctx.barrier()
        start = time.perf_counter()
        try:
            runner.prepare(request, host_shared=True)
            error = ""
        except Exception as exc:
            error = describe_error(exc)
        seconds = time.perf_counter() - start
        if how != "die":
            ctx.barrier()  # both ranks have given up: now look for leftovers
        results[how] = (error, seconds, [str(p) for p in leftover_segments()])
        Path(workdir, f"rank{ctx.rank}-{how}.txt").write_text(error)  # survives a death
    return results
