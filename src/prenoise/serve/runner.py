"""What one job does on the pipeline: prepare (any thread), then denoise/decode/write (executor).

`prepare_job` is `Ref2VAPipeline.prepare` of the job's plan (admitted by `build_plan`) for
output 0 (overlapped arm) plus the request's derived metrics; it may run on the prepare-ahead
worker. `run_outputs` runs on the executor
thread only: it denoises every output (preparing outputs ≥ 1 with `prepare_next`), checks for
cancellation after every sampler step and between stages, and writes each MP4 through
`decode_and_write` (temporary name, renamed when complete). The calls and their arguments are
exactly those of `Ref2VAPipeline.generate`, so the files are byte-identical to `prenoise
generate` with the same recipe.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from prenoise.observe.metrics import RequestMetrics, derive_metrics
from prenoise.observe.tracing import Tracer
from prenoise.preparation.prediction import PredictionEvent
from prenoise.ref2va.conditioning import Conditioning
from prenoise.ref2va.pipeline import PreparedOutput, Ref2VAPipeline, output_path
from prenoise.ref2va.sampler import SamplingCancelled, StepInfo
from prenoise.serve.jobs import Job, JobState, JobStore

__all__ = ["JobCancelled", "PreparedJob", "prepare_job", "run_outputs"]


class JobCancelled(RuntimeError):
    """The job's cancel flag was seen at a stage boundary."""


@dataclass
class PreparedJob:
    """Output 0 ready to denoise, the shared conditioning, and how preparing it went."""

    conditioning: Conditioning
    first: PreparedOutput | None
    events: list[PredictionEvent]
    metrics: RequestMetrics
    seconds: float


def prepare_job(pipeline: Ref2VAPipeline, job: Job) -> PreparedJob:
    """Encode the references and draw output 0's noise on the calling thread.

    Stops at the next cancel point (`prenoise.guards.cancel.Cancelled`) once the job is cancelled.
    """
    tracer = Tracer()
    start = time.perf_counter()
    conditioning, first, events = pipeline.prepare(
        job.plan, "overlapped", tracer=tracer, cancel=job.cancel_requested
    )
    seconds = time.perf_counter() - start
    metrics = derive_metrics(tracer.spans, threading.get_ident())
    return PreparedJob(conditioning, first, events, metrics, seconds)


def check_cancel(job: Job) -> None:
    """Raise `JobCancelled` when the job's cancel flag is set."""
    if job.cancel_requested.is_set():
        raise JobCancelled(job.id)


def run_outputs(
    pipeline: Ref2VAPipeline, store: JobStore, job: Job, prepared: PreparedJob, out: Path
) -> None:
    """Denoise, decode and write every output of `job` (paths appended to `job.paths`).

    Raises `JobCancelled` or `SamplingCancelled` when cancelled; the caller removes the files.
    """
    plan = job.plan

    def on_step(info: StepInfo) -> None:
        store.set_progress(job, step=info.step)
        if "first_step" not in job.timings:
            job.timings["first_step"] = job.elapsed()
        if job.cancel_requested.is_set():
            raise SamplingCancelled(job.id)

    for index in range(len(plan.outputs)):
        store.set_progress(job, output=index, step=0)
        if index == 0:
            output, prepared.first = prepared.first, None
            if output is None:
                raise RuntimeError(f"job {job.id}: output 0 was already consumed")
        else:
            store.transition(job, JobState.PREPARING)
            output = pipeline.prepare_next(
                plan, prepared.conditioning, index, cancel=job.cancel_requested
            )
        check_cancel(job)
        store.transition(job, JobState.DENOISING)
        start = time.perf_counter()
        video, audio = pipeline.denoise(plan, output, callback=on_step)
        del output  # the sampler owns (and has dropped) the initial noise
        _add(job, "denoise", time.perf_counter() - start)
        check_cancel(job)
        store.transition(job, JobState.DECODING)
        start = time.perf_counter()
        path = pipeline.decode_and_write(plan, video, audio, output_path(out, index))
        del video, audio
        with store.lock:
            job.paths.append(path)
        _add(job, "decode", time.perf_counter() - start)
        check_cancel(job)


def _add(job: Job, key: str, seconds: float) -> None:
    job.timings[key] = job.timings.get(key, 0.0) + seconds
