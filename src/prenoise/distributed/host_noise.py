"""Host-shared noise: the ranks of one host split the draw streams and write each value once.

For one output the contract's streams as planned (`OutputDraws`: video, audio, one per visual
condition; each on its own fresh generator) are assigned whole to the host's ranks (largest first,
to the least-loaded rank). Each field of `NoiseFields` is one shared segment; the conditions'
streams are written at their row offsets of one segment, so the concatenated field is a plain view.
The host leader creates the segments, every rank maps them, draws its streams into them and reports;
the leader unlinks the names once all have mapped. Every rank then holds views of the same memory:
values bitwise equal to `run_stream` of each stream, i.e. to a single-process serial draw.

A rank whose draw fails reports the original error text and re-raises it; the others raise
`RankFailedError` carrying that text. A rank that does not report within `timeout_s` makes the
others raise `RankTimeoutError`. Names are unlinked on success, failure and interrupt.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from prenoise.distributed.shm import (
    SharedSegment,
    create_segment,
    map_segment,
    segment_path,
    unlink_segment,
)
from prenoise.distributed.status import RankFailedError, StatusBoard
from prenoise.noise import kernel
from prenoise.noise import streams as noise_streams
from prenoise.noise.layouts import Patchify
from prenoise.observe.tracing import NULL_TRACER, Category, Tracer
from prenoise.preparation.draws import Stream, fill_normal_, run_stream
from prenoise.ref2va.noise import NoiseFields, OutputDraws

__all__ = ["HostSharedNoise", "StreamJob", "assign_streams", "draw_into", "plan_jobs"]

FIELDS = ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")


@dataclass(frozen=True)
class StreamJob:
    """One whole stream, drawn by host rank `owner` into `field` at byte `offset`."""

    stream: Stream
    field: str
    offset: int
    owner: int

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Shape the stream's single draw returns."""
        return self.stream.draws[0].output_shape


def assign_streams(numels: list[int], n_ranks: int) -> list[int]:
    """Owner index per stream: largest stream first, each to the least-loaded rank (lowest on
    ties). Deterministic, so every rank computes the same assignment."""
    load = [0] * n_ranks
    owners = [0] * len(numels)
    for i in sorted(range(len(numels)), key=lambda i: (-numels[i], i)):
        owner = min(range(n_ranks), key=lambda r: (load[r], r))
        owners[i] = owner
        load[owner] += numels[i]
    return owners


def plan_jobs(
    draws: OutputDraws, n_ranks: int
) -> tuple[list[StreamJob], dict[str, tuple[int, ...] | None]]:
    """The jobs of one output's streams (`draws`, in their noise stream) over `n_ranks` host
    ranks, and each field's full shape (None: no visual conditions)."""
    video, audio, conds = draws.video, draws.audio, draws.conditions
    streams = [video, audio, *conds]
    owners = assign_streams([s.numel for s in streams], n_ranks)
    jobs = [StreamJob(video, FIELDS[0], 0, owners[0]), StreamJob(audio, FIELDS[1], 0, owners[1])]
    offset, rows = 0, 0
    for stream, owner in zip(conds, owners[2:], strict=True):
        jobs.append(StreamJob(stream, FIELDS[2], offset, owner))
        out_rows, features = stream.draws[0].output_shape
        offset += out_rows * features * 4
        rows += out_rows
    field_shapes: dict[str, tuple[int, ...] | None] = {
        FIELDS[0]: jobs[0].output_shape,
        FIELDS[1]: jobs[1].output_shape,
        FIELDS[2]: (rows, jobs[2].output_shape[1]) if conds else None,
    }
    return jobs, field_shapes


def draw_into(stream: Stream, out: torch.Tensor) -> None:
    """Write `run_stream(stream)`'s single result into the contiguous `out`, bit-for-bit, in the
    stream's own noise stream (`stream.noise_stream`; None is native).

    A draw without keep or layout is filled in place; a `Patchify` draw is drawn into a private
    buffer and its kept, permuted view is copied straight into `out` (one copy, no intermediate);
    anything else goes through `run_stream` and is copied.
    """
    if len(stream.draws) != 1:
        raise ValueError(f"stream {stream.name!r}: host sharing takes single-draw streams")
    draw = stream.draws[0]
    if tuple(out.shape) != draw.output_shape or out.dtype != draw.dtype:
        raise ValueError(f"stream {stream.name!r}: output {tuple(out.shape)} {out.dtype}")
    chosen = stream.noise_stream or noise_streams.NATIVE
    if draw.keep is None and draw.layout is None and draw.draw_dtype == draw.dtype:
        fill_normal_(out.view(draw.shape), stream.generator(), noise_stream=chosen)
    elif isinstance(draw.layout, Patchify) and draw.draw_dtype == draw.dtype:
        full = kernel.empty(draw.shape, dtype=draw.dtype)
        fill_normal_(full, stream.generator(), noise_stream=chosen)
        kept = full if draw.keep is None else full[tuple(slice(0, k) for k in draw.keep)]
        draw.layout.apply_into(kept, out)
    else:
        out.copy_(run_stream(stream)[draw.name])


@dataclass
class _Batch:
    """The shared draws of one output seed, in flight or done."""

    draws: OutputDraws
    jobs: list[StreamJob]
    field_shapes: dict[str, tuple[int, ...] | None]
    paths: dict[str, str] = field(default_factory=dict)
    segments: dict[str, SharedSegment] = field(default_factory=dict)
    error: BaseException | None = None
    thread: threading.Thread | None = None

    @property
    def seed(self) -> int:
        """The output's seed (names its store keys and segments)."""
        return self.draws.seed


class HostSharedNoise:
    """A `NoiseSource` (see `Ref2VAPipeline`) drawing each output's streams once per host.

    `start(draws)` begins an output's shared draws on a background thread (call it before
    encoding to overlap them, with the plan's `outputs[i]`); calling the object (as the
    pipeline's noise source) takes the result, starting and taking at once when nothing was
    started for that seed. `close()` unlinks
    every name this object knows and drops unfinished batches; use it in a `finally`.
    """

    def __init__(
        self,
        board: StatusBoard,
        host_ranks: list[int],
        rank: int,
        request_id: str,
        timeout_s: float,
        tracer: Tracer = NULL_TRACER,
    ) -> None:
        self.board = board
        self.host_ranks = host_ranks
        self.rank = rank
        self.index = host_ranks.index(rank)
        self.request_id = request_id
        self.timeout_s = timeout_s
        self.tracer = tracer
        self.batches: dict[int, _Batch] = {}
        self.fallbacks: list[str] = []
        self.started_ahead: set[int] = set()
        self._known_paths: list[str] = []

    # -- background side -------------------------------------------------------------------------
    def start(self, draws: OutputDraws) -> None:
        """Begin the shared draws of one output's streams (`draws`, in their noise stream) on
        a background thread."""
        seed = draws.seed
        if seed in self.batches:
            raise RuntimeError(f"host-shared draws of seed {seed} already started")
        jobs, field_shapes = plan_jobs(draws, len(self.host_ranks))
        batch = _Batch(draws, jobs, field_shapes)
        self.batches[seed] = batch
        batch.thread = threading.Thread(
            target=self._run, args=(batch,), name=f"host-noise-{seed}", daemon=True
        )
        batch.thread.start()

    def _run(self, batch: _Batch) -> None:
        # Runs while the request thread encodes; every stream draws from its own fresh generator
        # (`Stream.generator`), never the global RNG the request thread may draw from.
        stage = f"{batch.seed}"
        try:
            self._map(batch)
            for job in batch.jobs:
                if job.owner == self.index:
                    with self.tracer.span(f"draw:{job.stream.name}", Category.PREPARE):
                        out = batch.segments[job.field].tensor(job.offset, job.output_shape)
                        draw_into(job.stream, out)
            self.board.post_ok(f"{stage}/drawn")
            if self.index == 0:  # the names go once every rank holds a mapping
                self.board.wait(f"{stage}/mapped", self.host_ranks, self.timeout_s)
                self._unlink(batch)
        except BaseException as exc:
            other = self.board.first_error() if isinstance(exc, FileNotFoundError) else None
            # a segment unlinked under us means another rank failed first: report that one
            batch.error = RankFailedError(other) if other is not None else exc
            self.board.post_error(f"host-shared draw of seed {batch.seed}", batch.error)
            if self.index == 0:
                self._unlink(batch)

    def _map(self, batch: _Batch) -> None:
        sizes = {name: math.prod(shape) * 4 for name, shape in batch.field_shapes.items() if shape}
        if self.index == 0:  # the leader maps before publishing, so it never loses a name
            for name, nbytes in sizes.items():
                path = segment_path(os.getpid(), f"{self.request_id}-{batch.seed}-{name}")
                self._known_paths.append(str(path))
                batch.paths[name] = str(path)
                create_segment(path, nbytes)
                batch.segments[name] = map_segment(path, nbytes)
            self.board.publish(self._paths_key(batch), "|".join(batch.paths[n] for n in sizes))
        else:
            paths = self.board.fetch(self._paths_key(batch), self.timeout_s).split("|")
            batch.paths = dict(zip(sizes, paths, strict=True))
            self._known_paths.extend(paths)
            for name, nbytes in sizes.items():
                batch.segments[name] = map_segment(Path(batch.paths[name]), nbytes)
        self.board.post_ok(f"{batch.seed}/mapped")

    def _paths_key(self, batch: _Batch) -> str:
        return f"{batch.seed}/host-of-rank{self.host_ranks[0]}/paths"  # one key per host

    def _unlink(self, batch: _Batch) -> None:
        for path in batch.paths.values():
            unlink_segment(Path(path))

    # -- request side ----------------------------------------------------------------------------
    def __call__(self, draws: OutputDraws, tracer: Tracer) -> NoiseFields:
        """The output's noise: `run_stream` of each of `draws`' streams (the planned streams for
        the encoded shapes), bit for bit, in their noise stream (see the class docstring)."""
        seed, noise_stream = draws.seed, draws.noise_stream
        if seed not in self.batches:
            self.start(draws)
        else:
            self.started_ahead.add(seed)
        batch = self.batches.pop(seed)
        if batch.draws.noise_stream != noise_stream:  # started for another request's stream: a bug
            raise RuntimeError(
                f"host-shared draws of seed {seed} were started in noise stream "
                f"{batch.draws.noise_stream!r}, the request draws {noise_stream!r}"
            )
        with tracer.span("wait:host_shared_noise", Category.WAIT):
            self._take(batch)
        fields = {
            name: batch.segments[name].tensor(0, shape) if shape else None
            for name, shape in batch.field_shapes.items()
        }
        cond = fields[FIELDS[2]]
        predicted, encoded = batch.draws.condition_shapes, draws.condition_shapes
        if predicted != encoded:  # prediction missed: redraw the conditions here (identical
            # on every rank, so the ranks still agree), keep the shared video and audio
            self.fallbacks.append(
                f"seed {seed}: predicted {list(predicted)}, encoded {list(encoded)}"
            )
            with tracer.span("draw:visual_condition_noise", Category.NOISE):
                parts = [run_stream(s)[s.name] for s in draws.conditions]
                cond = None if not parts else parts[0] if len(parts) == 1 else torch.cat(parts)
        video, audio = fields[FIELDS[0]], fields[FIELDS[1]]
        assert video is not None and audio is not None
        return NoiseFields(video, audio, cond)

    def _take(self, batch: _Batch) -> None:
        thread = batch.thread
        assert thread is not None
        self.board.wait_until(
            lambda: not thread.is_alive(),
            f"its host-shared draws of seed {batch.seed}",
            self.timeout_s,
            who="this rank's draw thread",
        )
        if batch.error is not None:
            raise batch.error
        self.board.wait(f"{batch.seed}/drawn", self.host_ranks, self.timeout_s)

    def close(self) -> None:
        """Unlink every segment name this object knows (idempotent; never raises)."""
        for path in self._known_paths:
            with contextlib.suppress(OSError):
                unlink_segment(Path(path))
        self.batches.clear()
