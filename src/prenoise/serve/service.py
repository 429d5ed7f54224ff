"""One service instance: settings, the pipeline (one model instance), jobs, scheduler, metrics."""

from __future__ import annotations

import logging
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from prenoise.guards.env import check_environment
from prenoise.ref2va.cli_options import load_models
from prenoise.ref2va.conditioning import validate_references
from prenoise.ref2va.config import Recipe
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.request_plan import Ref2VARequestPlan
from prenoise.serve.admission import Admission
from prenoise.serve.jobs import Job, JobState, JobStore, remove_uploads
from prenoise.serve.metrics import KernelBackend, ServeMetrics, kernel_backend
from prenoise.serve.orphans import OutputDirLock, sweep_orphans
from prenoise.serve.scheduler import Scheduler
from prenoise.serve.schema import ServeLimits

__all__ = ["ServeSettings", "Service"]

logger = logging.getLogger("prenoise.serve")


@dataclass(frozen=True)
class ServeSettings:
    """What `prenoise serve` is started with.

    `recipe` gives the models and every request default; outputs go to `output_dir` (uploads
    to its `.uploads/` folder, removed when their job ends); reference paths must lie inside
    `media_root` (None: only uploads are accepted).
    """

    recipe: Recipe
    output_dir: Path
    media_root: Path | None = None
    prepare_ahead: int = 1
    limits: ServeLimits = field(default_factory=ServeLimits)
    max_finished: int = 256
    io_threads: int = 4
    """Threads the HTTP layer may use for blocking work (validation, file I/O): AnyIO's pool."""
    body_idle_timeout_s: float = 30.0
    """A request body that sends nothing for this long is answered 408 and released."""
    body_timeout_s: float = 120.0
    """A request body not complete this long after its headers is answered 408 and released."""
    headers_timeout_s: float = 10.0
    """A connection whose request headers take longer is answered 408 and closed (applied by
    the uvicorn protocol `connections.http_protocol`, which `prenoise serve` runs)."""
    retry_after_s: int = 5
    """The `Retry-After` of a request refused because the queue or the upload space is full."""


class Service:
    """Builds the pipeline (unless given) and wires the store, scheduler and metrics."""

    def __init__(self, settings: ServeSettings, pipeline: Ref2VAPipeline | None = None) -> None:
        check_environment()  # a bad PRENOISE_* value stops start-up, never reaches a request
        recipe = settings.recipe
        validate_references(recipe.references, recipe.limits)  # the defaults must be usable
        self.settings = settings
        self.pipeline = pipeline or Ref2VAPipeline(load_models(recipe), device=recipe.device)
        self.backend: KernelBackend = kernel_backend()
        self.metrics = ServeMetrics(self.backend)
        self.store = JobStore(settings.max_finished)
        self.scheduler = Scheduler(
            self.pipeline,
            self.store,
            self.metrics,
            settings.output_dir,
            prepare_ahead=settings.prepare_ahead,
        )
        self.upload_root = settings.output_dir / ".uploads"
        self._lock = OutputDirLock.take(settings.output_dir)  # one service per output directory
        self.swept: list[Path] = []
        self.admission = Admission(
            max_queued=settings.limits.max_queued,
            max_held_bytes=settings.limits.max_queued_upload_bytes,
            queued=lambda: self.scheduler.queue_depth,
            held=self.store.upload_bytes_held,
            retry_after_s=settings.retry_after_s,
        )

    def start(self) -> None:
        """Sweep what an earlier process left (`sweep_orphans`); start the executor."""
        self.swept = sweep_orphans(self.settings.output_dir)
        if self.swept:
            logger.info(
                "removed %d files an earlier service left in %s (partial MP4s, outputs of jobs "
                "this service does not know)",
                len(self.swept),
                self.settings.output_dir,
            )
        self.scheduler.start()

    def stop(self) -> None:
        """Cancel queued work, stop the running job at its next step, remove stray uploads."""
        self.scheduler.stop()
        shutil.rmtree(self.upload_root, ignore_errors=True)
        self._lock.release()

    @staticmethod
    def new_job_id() -> str:
        """A fresh random job id (32 hex digits)."""
        return uuid.uuid4().hex

    def upload_dir(self, job_id: str) -> Path:
        """The private upload folder of job `job_id`."""
        return self.upload_root / job_id

    def submit(
        self,
        job_id: str,
        plan: Ref2VARequestPlan,
        upload_dir: Path | None,
        upload_bytes: int = 0,
    ) -> Job:
        """Register and queue an admitted request (its plan, `build_plan`); `upload_bytes` stay
        counted against `max_queued_upload_bytes` until the job's uploads are removed."""
        job = Job(plan=plan, id=job_id, upload_dir=upload_dir, upload_bytes=upload_bytes)
        self.store.add(job)
        try:
            self.scheduler.submit(job)
        except RuntimeError:
            remove_uploads(job)
            self.store.transition(job, JobState.CANCELLED, error="service shutting down")
            raise
        return job

    def reject(self) -> None:
        """Count a refused request."""
        self.metrics.requests.labels(outcome="rejected").inc()

    def internal_error(self) -> None:
        """Count a request the service failed to answer (HTTP 500)."""
        self.metrics.requests.labels(outcome="error").inc()
