"""Rank functions for the spawned 2-rank tests (importable by the spawned children)."""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from prenoise.distributed import host_noise
from prenoise.distributed.bench import run_distributed_bench
from prenoise.distributed.group import init_distributed
from prenoise.distributed.request import broadcast_request
from prenoise.distributed.runner import DistributedRef2VA
from prenoise.distributed.shm import leftover_segments
from prenoise.distributed.status import describe_error
from prenoise.distributed.tensor_parallel import shard_text_encoder
from prenoise.distributed.verification import field_digests
from prenoise.ref2va.config import ParallelConfig, load_recipe
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.text_encoder import TextEncoder, TextEncoderConfig

TP_PROMPTS = ["a tiny test clip", "a second, longer prompt: rain on a tin roof at dusk, slow pan"]


def _setup(recipe_path: str, workdir: str, timeout_s: float) -> tuple[Any, Any, Any]:
    torch.set_num_threads(1)
    os.chdir(workdir)
    recipe = load_recipe(recipe_path)
    ctx = init_distributed(timeout_s)
    models = Ref2VAModels.default(recipe.model)
    request = broadcast_request(ctx, recipe if ctx.rank == 0 else None)
    runner = DistributedRef2VA(ctx, models, ParallelConfig(timeout_s=timeout_s))
    return ctx, runner, request


def prepare_both_modes_and_denoise(recipe_path: str, workdir: str) -> dict[str, Any]:
    """Per-rank and host-shared digests, a sequence-parallel denoise of the shared inputs, then a
    one-pair bench with `--encoder-threads 2`: its request labels (its progress stages), the
    thread counts it ran with and the count after it (the ranks start with 1)."""
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
    video, audio = runner.denoise(request.plan, shared.outputs[0])
    bench_labels: list[str] = []  # what `bench`'s progress shows, on every rank
    bench = run_distributed_bench(
        runner, request, pairs=1, warmup=1, encoder_threads=2, on_request=bench_labels.append
    )
    return {
        "rank": ctx.rank,
        "per_rank": per_rank_digests,
        "shared": shared_digests,
        "mapped": mapped,
        "used_prepared_noise": shared.outputs[0].used_prepared_noise,
        "leftovers": leftovers_after_prepare,
        "video": video,
        "audio": audio,
        "bench_labels": bench_labels,
        "bench": bench,
        "threads_after_bench": torch.get_num_threads(),
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


def _flip(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    out.view(-1).view(torch.int32)[0] ^= 1
    return out


# per-rank mode, rank 1 only: how its worker's draw of one field is changed
RANK1_CHANGES: dict[str, tuple[str, Any]] = {
    "rank1_bit": ("initial_video_noise", _flip),
    "rank1_stride": ("initial_audio_noise", lambda t: t.t().contiguous().t()),
    "rank1_dtype": ("initial_audio_noise", lambda t: t.double()),
    "rank1_shape": ("initial_audio_noise", lambda t: t.reshape(-1, 16)),
}


def verify_with_a_broken_rank(recipe_path: str, workdir: str) -> list[tuple[str, Any]]:
    """`verify_distributed` unbroken, then with rank 1 broken in turn: a flipped bit in its
    host-shared draw (seen by every rank: only the single-process reference catches it), a
    flipped bit / other strides / dtype / shape in its own per-rank draw, and a worker that
    touches the global RNG. Returns `(scenario, verdict JSON)` per scenario, then
    `("overlap", {...})`: on which thread and when this rank drew each of its host-shared
    streams in the clean run, and when the request thread asked for the shared noise."""
    from prenoise.distributed.verification import verify_distributed
    from prenoise.ref2va import pipeline as pipeline_module

    ctx, runner, request = _setup(recipe_path, workdir, 60.0)
    real_draw_into, real_run_stream = host_noise.draw_into, pipeline_module.run_stream
    real_take = host_noise.HostSharedNoise._take
    drawn: list[tuple[str, str, float]] = []
    asked: list[tuple[str, float]] = []
    started = threading.Event()

    def recording_draw_into(stream: Any, out: torch.Tensor) -> None:
        drawn.append((stream.name, threading.current_thread().name, time.perf_counter()))
        started.set()
        real_draw_into(stream, out)

    def recording_take(self: Any, batch: Any) -> None:
        started.wait(30.0)  # deterministic order: the draw starts on its own, then we ask
        asked.append((threading.current_thread().name, time.perf_counter()))
        real_take(self, batch)

    verdicts: list[tuple[str, Any]] = []
    scenarios = ["clean", "shared_bit", *RANK1_CHANGES, "rank1_global_rng"]
    for scenario in scenarios:

        def draw_into(stream: Any, out: torch.Tensor) -> None:
            real_draw_into(stream, out)
            out.view(-1).view(torch.int32)[0] ^= 1

        def run_stream(*args: Any, scenario: str = scenario, **kw: Any) -> Any:
            result = real_run_stream(*args, **kw)
            if not threading.current_thread().name.startswith("ref2va-prep"):
                return result
            if scenario == "rank1_global_rng":
                torch.rand(1)
                return result
            name, change = RANK1_CHANGES[scenario]
            return {k: change(v) if k == name else v for k, v in result.items()}

        host_noise.draw_into = real_draw_into  # type: ignore[assignment]
        host_noise.HostSharedNoise._take = real_take  # type: ignore[method-assign]
        pipeline_module.run_stream = real_run_stream  # type: ignore[assignment]
        if scenario == "clean":
            host_noise.draw_into = recording_draw_into  # type: ignore[assignment]
            host_noise.HostSharedNoise._take = recording_take  # type: ignore[method-assign]
        elif ctx.rank == 1 and scenario == "shared_bit":
            host_noise.draw_into = draw_into  # type: ignore[assignment]
        elif ctx.rank == 1 and scenario.startswith("rank1_"):
            pipeline_module.run_stream = run_stream  # type: ignore[assignment]
        shared = scenario in ("clean", "shared_bit")
        result = verify_distributed(runner, request, host_shared=shared)
        verdicts.append((scenario, {**result.to_json(), "summary": result.summary()}))
    host_noise.draw_into = real_draw_into  # type: ignore[assignment]
    host_noise.HostSharedNoise._take = real_take  # type: ignore[method-assign]
    verdicts.append(("overlap", {"rank": ctx.rank, "drawn": drawn, "asked": asked}))
    return verdicts


def _numel(encoder: TextEncoder) -> int:
    return sum(p.numel() for p in encoder.t5.parameters())


def tp_rank(recipe_path: str, workdir: str) -> dict[str, Any]:
    """Replicated vs TP=2 embeddings (2 layers, 4 heads), then a TP=2 runner's verification."""
    from prenoise.distributed.verification import verify_distributed

    torch.set_num_threads(1)
    os.chdir(workdir)
    ctx = init_distributed(60.0)
    encoder = TextEncoder.build(TextEncoderConfig(num_layers=2, num_heads=4), seed=7)
    replicated, mask = encoder.encode_with_mask(TP_PROMPTS)
    full_numel = _numel(encoder)
    tp = shard_text_encoder(encoder, 2, ctx.rank, ctx.world_size, 60.0)
    sharded, tp_mask = tp.encode_with_mask(TP_PROMPTS)
    gathered = tp.gather_replicated()
    regathered = gathered.encode_with_mask(TP_PROMPTS)[0]

    recipe = load_recipe(recipe_path)
    request = broadcast_request(ctx, recipe if ctx.rank == 0 else None)
    models = Ref2VAModels.default(recipe.model)
    runner = DistributedRef2VA(ctx, models, ParallelConfig(timeout_s=60.0, text_encoder_tp=2))
    verdict = verify_distributed(runner, request)
    return {
        "replicated": replicated,
        "sharded": sharded,
        "masks_equal": torch.equal(mask, tp_mask),
        "regathered_equal": torch.equal(regathered, replicated),
        "numel": (full_numel, _numel(encoder)),
        "tp_rank": tp.tp_rank,
        "verdict": verdict,
        "runner_sharded": runner.text_tp is not None and runner.text_tp.ranks == [0, 1],
    }


SHARED_RUN: dict[str, Callable[[str, str], Any]] = {
    "prepare_both_modes_and_denoise": prepare_both_modes_and_denoise,
    "verify_with_a_broken_rank": verify_with_a_broken_rank,
    "tp_rank": tp_rank,
}
"""The rank functions that healthy 2-rank jobs run, in this order, in one spawned job (see
`conftest.shared_ranks`): each spawn costs both ranks ~10 s of imports and a rendezvous, the
same for every one of them. (`fail_hang_die_in_draw` kills rank 1: it keeps its own job.)"""


def run_shared(recipe_path: str, workdir: str) -> dict[str, tuple[bool, Any]]:
    """Each of `SHARED_RUN` in turn on this rank: `(True, its value)` or `(False, the error and
    its traceback)`. The group is `init_distributed`'s, joined once and reused (it is idempotent).
    After a failure the later functions are not run (the ranks may be out of step): they report
    `(False, "not run: ...")`, so their tests fail too."""
    results: dict[str, tuple[bool, Any]] = {}
    failed = ""
    for name, fn in SHARED_RUN.items():
        if failed:
            results[name] = (False, f"not run: {failed} failed first on rank {os.environ['RANK']}")
            continue
        try:
            results[name] = (True, fn(recipe_path, workdir))
        except Exception as exc:
            results[name] = (False, f"{describe_error(exc)}\n{traceback.format_exc()}")
            failed = name
    return results
