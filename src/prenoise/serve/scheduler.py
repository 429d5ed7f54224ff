"""The executor thread and the prepare-ahead worker.

Guarantees:
- One executor thread runs jobs one at a time, in submission order, on one model instance.
- With `prepare_ahead = N > 0`, the first N jobs waiting in the queue are prepared (media decoded
  and encoded, noise drawn: `prepare_job`) on one background worker thread while the executor
  denoises. The scheduler holds at most N prepared jobs besides the running one; cancelling a
  queued job drops its preparation (cancelled if it has not started, released when it finishes
  otherwise). Preparation calls the same pipeline methods with the same arguments as
  `Ref2VAPipeline.generate`, so the result does not depend on which thread prepared it.
- A job that raises is marked failed with a one-line error; the executor thread keeps running.
- Cancelling: a queued job is removed at once; a running one stops at its next step boundary
  (or stage boundary). A job being prepared (ahead or by the executor) stops at its next cancel
  point: between decoded frames and between noise chunks, so DELETE and shutdown do not wait for
  a whole preparation. Failed and cancelled jobs keep no files (outputs and uploads removed).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from prenoise.guards.budget import allocation_failure
from prenoise.guards.cancel import Cancelled
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.sampler import SamplingCancelled
from prenoise.serve.jobs import (
    TERMINAL,
    InvalidTransition,
    Job,
    JobState,
    JobStore,
    delete_files,
    remove_uploads,
)
from prenoise.serve.metrics import ServeMetrics
from prenoise.serve.runner import JobCancelled, PreparedJob, check_cancel, prepare_job, run_outputs

__all__ = ["Scheduler"]

logger = logging.getLogger("prenoise.serve")


class Scheduler:
    """Queue + executor thread + bounded prepare-ahead (see the module docstring)."""

    def __init__(
        self,
        pipeline: Ref2VAPipeline,
        store: JobStore,
        metrics: ServeMetrics,
        output_dir: Path,
        *,
        prepare_ahead: int = 1,
    ) -> None:
        if prepare_ahead < 0:
            raise ValueError(f"prepare_ahead must be >= 0, got {prepare_ahead}")
        self.pipeline = pipeline
        self.store = store
        self.metrics = metrics
        self.output_dir = output_dir
        self.prepare_ahead = prepare_ahead
        self.ahead_high_water = 0
        """Most prepared-ahead jobs the scheduler held at once (never above `prepare_ahead`)."""
        self._queue: deque[Job] = deque()
        self._ahead: dict[str, Future[PreparedJob]] = {}
        self._current: Job | None = None
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="prenoise-serve-executor")
        self._pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="prenoise-serve-prepare")
            if prepare_ahead > 0
            else None
        )

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the executor thread."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Cancel every queued job, stop the running one at its next step, join the threads."""
        with self._cond:
            self._stopping = True
            queued = list(self._queue)
            self._queue.clear()
            futures = list(self._ahead.values())
            self._ahead.clear()
            for job in [*queued, self._current]:
                if job is not None:  # stops their preparation (ahead or running) too
                    job.cancel_requested.set()
            self._cond.notify_all()
        for future in futures:
            future.cancel()
        for job in queued:
            self._finish(job, JobState.CANCELLED)
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self.metrics.queue_depth.set(0)

    @property
    def alive(self) -> bool:
        """Whether the executor thread is running."""
        return self._thread.is_alive()

    # -- queue -----------------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        """Queue a registered job (state `queued`)."""
        with self._cond:
            if self._stopping:
                raise RuntimeError("the service is shutting down")
            self._queue.append(job)
            self._refill_locked()
            self.metrics.queue_depth.set(len(self._queue))
            self._cond.notify_all()

    def cancel(self, job: Job) -> bool:
        """Cancel `job`: removed now if queued, else flagged; False if it already finished."""
        with self._cond:
            queued = job in self._queue
            if queued:
                job.cancel_requested.set()  # a preparation already running stops at its next point
                self._queue.remove(job)
                future = self._ahead.pop(job.id, None)
                if future is not None:
                    future.cancel()  # not started: never runs; running: result dropped
                del future
                self._refill_locked()
                self.metrics.queue_depth.set(len(self._queue))
        if queued:
            self._finish(job, JobState.CANCELLED)
            return True
        with self.store.lock:
            if job.state in TERMINAL:
                return False
            job.cancel_requested.set()
        return True

    @property
    def queue_depth(self) -> int:
        """Jobs waiting (the running one excluded)."""
        with self._cond:
            return len(self._queue)

    @property
    def ahead_count(self) -> int:
        """Prepared-ahead jobs currently held (running or finished preparations)."""
        with self._cond:
            return len(self._ahead)

    @property
    def current(self) -> Job | None:
        """The job the executor is running, if any."""
        with self._cond:
            return self._current

    def _refill_locked(self) -> None:
        """Start preparing the first `prepare_ahead` queued jobs that are not prepared yet."""
        if self._pool is None or self._stopping:
            return
        for job in itertools.islice(self._queue, self.prepare_ahead):
            if job.id not in self._ahead:
                self._ahead[job.id] = self._pool.submit(self._prepare_ahead, job)
        self.ahead_high_water = max(self.ahead_high_water, len(self._ahead))

    def _prepare_ahead(self, job: Job) -> PreparedJob:
        job.prepared_ahead = "running"
        try:
            prepared = prepare_job(self.pipeline, job)
        except BaseException:
            job.prepared_ahead = "failed"
            raise
        job.prepared_ahead = "ready"
        return prepared

    # -- executor --------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                job = self._queue.popleft()
                ahead = self._ahead.pop(job.id, None)
                self._current = job
                self._refill_locked()
                self.metrics.queue_depth.set(len(self._queue))
            try:
                self._execute(job, ahead)
            except BaseException:  # never let one job take the executor down
                logger.exception("job %s: unexpected error in the executor", job.id)
                self._finish(job, JobState.FAILED, "internal error (see the service log)")
            finally:
                del ahead
                with self._cond:
                    self._current = None

    def _execute(self, job: Job, ahead: Future[PreparedJob] | None) -> None:
        started = time.perf_counter()
        job.timings["queued"] = started - job.submitted_s
        prepared: PreparedJob | None = None
        try:
            self.store.transition(job, JobState.PREPARING)
            if ahead is not None and not ahead.cancel():
                prepared = ahead.result()  # prepared (or being prepared) on the worker
            else:
                job.prepared_ahead = "no"
                prepared = prepare_job(self.pipeline, job)
            ahead = None
            self._record_preparation(job, prepared, time.perf_counter() - started)
            check_cancel(job)
            out = self.output_dir / f"{job.id}.mp4"
            run_outputs(self.pipeline, self.store, job, prepared, out)
            prepared = None
            self._finish(job, JobState.DONE)
        except (JobCancelled, SamplingCancelled, Cancelled):
            self._finish(job, JobState.CANCELLED)
        except Exception as exc:
            logger.warning("job %s failed: %s: %s", job.id, type(exc).__name__, exc)
            self._finish(job, JobState.FAILED, _one_line(exc))
        finally:
            prepared = None

    def _record_preparation(self, job: Job, prepared: PreparedJob, waited: float) -> None:
        job.timings["prepare"] = prepared.seconds
        job.timings["prepare_wait"] = waited
        job.prediction_fallbacks = len(prepared.events)
        self.metrics.prep_window.observe(prepared.metrics.prep_window_s)
        self.metrics.noise_critical.observe(prepared.metrics.noise_critical_s)
        self.metrics.prepare_wait.observe(waited)
        if prepared.events:
            self.metrics.fallbacks.inc(len(prepared.events))

    def _finish(self, job: Job, state: JobState, error: str | None = None) -> None:
        """Terminal bookkeeping: files, state, metrics. Ignores an already finished job."""
        if state is not JobState.DONE:
            delete_files(job)
        remove_uploads(job)
        try:
            self.store.transition(job, state, error=error)
        except InvalidTransition:
            return
        self.metrics.requests.labels(outcome=state.value).inc()
        if state is JobState.DONE:
            self.metrics.end_to_end.observe(job.timings["total"])
            if "first_step" in job.timings:
                self.metrics.first_step.observe(job.timings["first_step"])


def _one_line(exc: BaseException) -> str:
    low_memory = allocation_failure(exc)  # low memory is named as such, with the limit that binds
    if low_memory is not None:
        return low_memory
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
