"""Jobs and their state machine; `JobStore` is the thread-safe table the routes read.

States: `queued → preparing → denoising → decoding → done`, with `preparing`/`denoising`/
`decoding` repeating per output, and `failed` or `cancelled` reachable from every non-terminal
state. `JobStore.transition` refuses any other move (`InvalidTransition`), so a terminal job never
changes again. Finished jobs beyond `max_finished` are evicted oldest first, together with their
output files.
"""

from __future__ import annotations

import enum
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prenoise.ref2va.config import Recipe
from prenoise.ref2va.request_plan import Ref2VARequestPlan

__all__ = [
    "TERMINAL",
    "InvalidTransition",
    "Job",
    "JobState",
    "JobStore",
    "delete_files",
    "remove_uploads",
]


class JobState(str, enum.Enum):
    """Where a job is; the string value is what the API reports."""

    QUEUED = "queued"
    PREPARING = "preparing"
    DENOISING = "denoising"
    DECODING = "decoding"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})
_ENDS = {JobState.FAILED, JobState.CANCELLED}
_ALLOWED: dict[JobState, set[JobState]] = {
    JobState.QUEUED: {JobState.PREPARING} | _ENDS,
    JobState.PREPARING: {JobState.DENOISING} | _ENDS,
    JobState.DENOISING: {JobState.DECODING} | _ENDS,
    JobState.DECODING: {JobState.PREPARING, JobState.DENOISING, JobState.DONE} | _ENDS,
}


class InvalidTransition(RuntimeError):
    """A state change the state machine does not allow (e.g. anything out of a terminal state)."""


@dataclass(eq=False)
class Job:
    """One request (compared by identity). State changes go through `JobStore.transition`.

    `plan` is the request as admitted (`build_plan`): preparing, denoising and decoding it
    receive this very plan and resolve nothing again."""

    plan: Ref2VARequestPlan
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    state: JobState = JobState.QUEUED
    created_unix: float = field(default_factory=time.time)
    submitted_s: float = field(default_factory=time.perf_counter)
    step: int = 0
    output_index: int = 0
    prepared_ahead: str = "no"  # no | running | ready
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    paths: list[Path] = field(default_factory=list)
    upload_dir: Path | None = None
    upload_bytes: int = 0
    """Body bytes of the request that saved `upload_dir`: held until the uploads are removed."""
    deleted: bool = False
    """Set (under the store's lock) when the job is removed or evicted, before its files go."""
    prediction_fallbacks: int = 0
    cancel_requested: threading.Event = field(default_factory=threading.Event)

    @property
    def recipe(self) -> Recipe:
        """The request's recipe (`plan.recipe`)."""
        return self.plan.recipe

    def elapsed(self) -> float:
        """Seconds since submission (perf_counter clock)."""
        return time.perf_counter() - self.submitted_s

    def progress(self) -> str:
        """Where the job is: "3/8" (denoising steps done / steps) while denoising, else the state,
        with "output i/N" when the request makes several ("preparing output 2/3"; the `output`
        field of the view says which output a denoising job is on)."""
        outputs = self.recipe.outputs
        if self.state is JobState.DENOISING:
            return f"{self.step}/{self.recipe.steps}"
        if self.state in (JobState.PREPARING, JobState.DECODING) and outputs > 1:
            return f"{self.state.value} output {self.output_index + 1}/{outputs}"
        return self.state.value

    def view(self) -> dict[str, Any]:
        """The JSON view `GET /v1/videos/{id}` returns."""
        total = self.recipe.steps
        return {
            "id": self.id,
            "state": self.state.value,
            "progress": self.progress(),
            "step": self.step,
            "steps": total,
            "output": self.output_index,
            "outputs": self.recipe.outputs,
            "prepared_ahead": self.prepared_ahead,
            # dict() copies atomically: the executor adds timings without the store's lock
            "timings": {k: round(v, 6) for k, v in dict(self.timings).items()},
            "error": self.error,
            "prediction_fallbacks": self.prediction_fallbacks,
            "created_unix": self.created_unix,
            "content": [f"/v1/videos/{self.id}/content?output={i}" for i in range(len(self.paths))]
            if self.state is JobState.DONE
            else [],
        }


class JobStore:
    """Thread-safe `id → Job` table with the transition rules and bounded finished history."""

    def __init__(self, max_finished: int = 256) -> None:
        self.max_finished = max_finished
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._finished: OrderedDict[str, None] = OrderedDict()
        self.lock = threading.RLock()

    def add(self, job: Job) -> Job:
        """Register a new queued job."""
        with self.lock:
            self._jobs[job.id] = job
        return job

    def get(self, job_id: str) -> Job | None:
        """The job, or None when unknown (or evicted)."""
        with self.lock:
            return self._jobs.get(job_id)

    def upload_bytes_held(self) -> int:
        """Upload bytes of the jobs whose upload folder still exists (admission's bound)."""
        with self.lock:
            return sum(job.upload_bytes for job in self._jobs.values() if job.upload_dir)

    def __len__(self) -> int:
        with self.lock:
            return len(self._jobs)

    def transition(self, job: Job, state: JobState, *, error: str | None = None) -> None:
        """Move `job` to `state` or raise `InvalidTransition`; terminal moves record `total`."""
        with self.lock:
            if state not in _ALLOWED.get(job.state, set()):
                raise InvalidTransition(f"job {job.id}: {job.state.value} → {state.value}")
            job.state = state
            if error is not None:
                job.error = error
            if state in TERMINAL:
                job.timings["total"] = job.elapsed()
                self._finished[job.id] = None
                self._evict_locked()

    def set_progress(self, job: Job, *, step: int | None = None, output: int | None = None) -> None:
        """Update the denoising step and/or output index."""
        with self.lock:
            if step is not None:
                job.step = step
            if output is not None:
                job.output_index = output

    def remove(self, job_id: str) -> Job | None:
        """Forget a finished job and delete its output files; None if unknown or not finished."""
        with self.lock:
            job = self._jobs.get(job_id)
            if job is None or job.state not in TERMINAL:
                return None
            del self._jobs[job_id]
            self._finished.pop(job_id, None)
            job.deleted = True
        delete_files(job)
        return job

    def _evict_locked(self) -> None:
        while len(self._finished) > self.max_finished:
            old_id, _ = self._finished.popitem(last=False)
            old = self._jobs.pop(old_id, None)
            if old is not None:
                old.deleted = True
                delete_files(old)


def delete_files(job: Job) -> None:
    """Remove a job's outputs and its upload folder (missing files are fine)."""
    for path in job.paths:
        path.unlink(missing_ok=True)
    job.paths = []
    remove_uploads(job)


def remove_uploads(job: Job) -> None:
    """Remove the job's upload folder, if it has one."""
    if job.upload_dir is not None:
        shutil.rmtree(job.upload_dir, ignore_errors=True)
        job.upload_dir = None
