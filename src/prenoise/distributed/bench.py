"""`torchrun … prenoise bench`: per-rank drawing vs host-shared preparation, host totals.

Every request starts after a barrier. Each rank records its preparation wall time, the CPU
seconds of its whole process (all threads) during preparation, its drawing seconds (worker
PREPARE spans plus request-thread `draw:`/`recompute:` spans) and its proportional set size
(Pss, shared pages divided among the processes mapping them) sampled every 10 ms. Rank 0 sums the
ranks per request: host CPU seconds, host drawing seconds, and the host's peak Pss (the sum over
ranks on a common time grid) minus the host Pss just before the request. Modes alternate inside
each pair (per_rank→host_shared, then host_shared→per_rank). `encoder_threads` (`prenoise bench
--encoder-threads`) sets every rank's torch intra-op threads for the bench, as in one process;
each rank records the count it ran with (`torch_threads`), and the previous count comes back.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist

from prenoise.distributed.request import ResolvedRequest
from prenoise.distributed.runner import DistributedPrepared, DistributedRef2VA
from prenoise.observe.metrics import peak_rss_bytes, reset_peak_rss
from prenoise.observe.tracing import Category, Tracer
from prenoise.ref2va.bench import machine_info
from prenoise.ref2va.pipeline import Arm

__all__ = ["MODES", "RankSample", "pss_bytes", "run_distributed_bench"]

MODES = ("per_rank", "host_shared")
_SAMPLE_S = 0.01


def pss_bytes() -> int:
    """This process's proportional set size in bytes (0 where smaps_rollup is unavailable)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _PssSampler:
    """Samples `pss_bytes()` every 10 ms on a thread: `(seconds since start, bytes)` pairs."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._start = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="pss-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.perf_counter() - self._start, pss_bytes()))
            if self._stop.wait(_SAMPLE_S):
                break

    def __enter__(self) -> _PssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.perf_counter() - self._start, pss_bytes()))


@dataclass
class RankSample:
    """One rank's measurements of one request."""

    wall_s: float
    cpu_s: float
    draw_s: float
    wait_s: float
    encode_s: float
    peak_rss_bytes: int
    pss_before_bytes: int
    noise_private_bytes: int
    noise_shared_bytes: int
    torch_threads: int
    pss_samples: list[tuple[float, int]]


def _draw_seconds(tracer: Tracer) -> tuple[float, float, float]:
    draw = wait = encode = 0.0
    for span in tracer.spans:
        if span.category == Category.PREPARE or (
            span.category == Category.NOISE and span.name.startswith(("draw:", "recompute:"))
        ):
            draw += span.duration_s
        elif span.category == Category.WAIT:
            wait += span.duration_s
        elif span.category == Category.ENCODE:
            encode += span.duration_s
    return draw, wait, encode


def _one_request(
    runner: DistributedRef2VA, request: ResolvedRequest, mode: str, arm: Arm
) -> RankSample:
    runner.ctx.barrier()
    tracer = Tracer()
    reset_peak_rss()
    before = pss_bytes()
    with _PssSampler() as sampler:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        prepared = runner.prepare(request, arm, tracer=tracer, host_shared=mode == "host_shared")
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    private, shared = _held_noise(prepared)
    del prepared
    draw, wait, encode = _draw_seconds(tracer)
    threads = torch.get_num_threads()
    return RankSample(
        wall,
        cpu,
        draw,
        wait,
        encode,
        peak_rss_bytes(),
        before,
        private,
        shared,
        threads,
        sampler.samples,
    )


def _held_noise(prepared: DistributedPrepared) -> tuple[int, int]:
    """Bytes of initial noise the denoise inputs hold: (private, in shared segments)."""
    private = shared = 0
    for output in prepared.outputs:
        for rows in (output.inputs.video_rows, output.inputs.audio_rows):
            nbytes = rows.numel() * rows.element_size()
            if rows.untyped_storage().filename:
                shared += nbytes
            else:
                private += nbytes
    return private, shared


def _host_peak(samples: list[list[tuple[float, int]]]) -> int:
    """Peak of the sum over ranks of step-interpolated Pss samples on a 10 ms grid."""
    end = max(s[-1][0] for s in samples)
    index = [0] * len(samples)
    peak, step = 0, 0
    while step * _SAMPLE_S <= end + _SAMPLE_S:
        t = step * _SAMPLE_S
        for i, series in enumerate(samples):
            while index[i] + 1 < len(series) and series[index[i] + 1][0] <= t:
                index[i] += 1
        peak = max(peak, sum(series[i][1] for i, series in zip(index, samples, strict=True)))
        step += 1
    return peak


def _host_row(ranks: list[RankSample]) -> dict[str, float]:
    before = sum(r.pss_before_bytes for r in ranks)
    peak = _host_peak([r.pss_samples for r in ranks])
    return {
        "wall_s": max(r.wall_s for r in ranks),
        "host_cpu_s": sum(r.cpu_s for r in ranks),
        "host_draw_s": sum(r.draw_s for r in ranks),
        "max_rank_draw_s": max(r.draw_s for r in ranks),
        "max_rank_wait_s": max(r.wait_s for r in ranks),
        "host_encode_s": sum(r.encode_s for r in ranks),
        "host_pss_before_bytes": float(before),
        "host_peak_pss_bytes": float(peak),
        "host_peak_pss_delta_bytes": float(peak - before),
        "max_rank_peak_rss_bytes": float(max(r.peak_rss_bytes for r in ranks)),
        # one shared copy per host (every rank maps the same segments) vs a copy per rank
        "host_held_noise_bytes": float(
            sum(r.noise_private_bytes for r in ranks) + max(r.noise_shared_bytes for r in ranks)
        ),
    }


def run_distributed_bench(
    runner: DistributedRef2VA,
    request: ResolvedRequest,
    *,
    pairs: int = 3,
    warmup: int = 1,
    arm: Arm = "overlapped",
    encoder_threads: int | None = None,
    on_request: Callable[[str], None] | None = None,
) -> dict[str, Any] | None:
    """Run the warm-up and the alternating pairs (collective); the summary on rank 0, else None.

    `encoder_threads`: torch intra-op threads on every rank while the bench runs (None: leave
    them). `on_request` hears each request's label as it starts, as the single-process bench says
    it: `warm-up i/N (mode)`, `pair i/N (mode)`."""
    previous_threads = torch.get_num_threads()
    if encoder_threads is not None:
        torch.set_num_threads(encoder_threads)
    try:
        return _bench(runner, request, pairs, warmup, arm, encoder_threads, on_request)
    finally:
        torch.set_num_threads(previous_threads)


def _bench(
    runner: DistributedRef2VA,
    request: ResolvedRequest,
    pairs: int,
    warmup: int,
    arm: Arm,
    encoder_threads: int | None,
    on_request: Callable[[str], None] | None,
) -> dict[str, Any] | None:
    notify = on_request or (lambda _label: None)
    threads = torch.get_num_threads()
    for i in range(warmup):
        notify(f"warm-up {i + 1}/{warmup} ({MODES[i % 2]})")
        _one_request(runner, request, MODES[i % 2], arm)
    rows: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    per_rank: dict[str, list[list[dict[str, Any]]]] = {m: [] for m in MODES}
    for pair in range(pairs):
        for mode in MODES if pair % 2 == 0 else tuple(reversed(MODES)):
            notify(f"pair {pair + 1}/{pairs} ({mode})")
            sample = _one_request(runner, request, mode, arm)
            gathered: list[Any] = [None] * runner.ctx.world_size
            dist.all_gather_object(gathered, sample, group=runner.ctx.cpu_group)
            if runner.ctx.rank == 0:
                rows[mode].append(_host_row(gathered))
                per_rank[mode].append(
                    [{k: v for k, v in asdict(s).items() if k != "pss_samples"} for s in gathered]
                )
    if runner.ctx.rank != 0:
        return None
    geo = request.plan.geometry
    return {
        "recipe": request.plan.recipe.name,
        "ranks": runner.ctx.world_size,
        "arm": arm,
        "pairs": pairs,
        "warmup": warmup,
        "request": {"latent": [geo.T, geo.h, geo.w], "audio_t": geo.audio_t, "frames": geo.frames},
        "medians": {
            mode: {k: statistics.median(r[k] for r in rows[mode]) for k in rows[mode][0]}
            for mode in MODES
            if rows[mode]
        },
        "runs": rows,
        "per_rank": per_rank,
        "threads": {
            "torch_intra_op_threads": threads,
            "encoder_threads_flag": encoder_threads,
            "cpu_count": os.cpu_count(),
        },
        "machine": machine_info(),
    }
