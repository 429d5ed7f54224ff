"""Overlap asserted, not assumed: which thread ran each prepared job, and when it was asked for.

`OverlapRecorder(monkeypatch)` wraps `PreparationExecutor._run` (a job starts on a thread),
`PreparationExecutor.take` (a consumer asks for a job) and `prenoise.preparation.draws.run_draw`
(a tensor is drawn, on a thread, inside a job or not). Every test that claims overlap asserts
with it that each prepared job ran on its executor's worker, not on the consumer's thread, and
had started before the consumer asked for it.

Scheduling is made deterministic, not assumed: `take` first waits (up to `GATE_S`) for the job
to start on its own. A correct executor starts it without being asked, so the order is then
certain; a job that only runs once it is asked (lazily, or inline on the consumer) still starts
after the ask, or on the wrong thread, and the assertion fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from prenoise.preparation import draws as draws_module
from prenoise.preparation.executor import PreparationExecutor, Prepared

GATE_S = 10.0
"""How long a recorded `take` waits for its job to start on its own before asking."""


@dataclass(frozen=True)
class JobRun:
    """A prepared job started by `executor` (its name and instance id) on `thread`."""

    executor: str
    executor_id: int
    thread_prefix: str
    job: str
    thread: str
    start: float


@dataclass(frozen=True)
class Take:
    """A consumer asked `executor` for `job` on `thread` at `asked`."""

    executor: str
    executor_id: int
    job: str
    thread: str
    asked: float


@dataclass(frozen=True)
class DrawRun:
    """`run_draw` of draw `name` on `thread`, inside prepared job `job` (None: outside jobs)."""

    name: str
    thread: str
    job: str | None
    start: float


class OverlapRecorder:
    """Records job runs, takes and draws (see the module docstring)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, draw_modules: Sequence[Any] = ()):
        self.runs: list[JobRun] = []
        self.takes: list[Take] = []
        self.draws: list[DrawRun] = []
        self._lock = threading.Lock()
        self._started: dict[tuple[int, str], threading.Event] = {}
        self._local = threading.local()
        real_run = PreparationExecutor._run
        real_take = PreparationExecutor.take
        real_draw = draws_module.run_draw
        recorder = self

        def run(executor: PreparationExecutor, job: Any, work: Callable[[], Any]) -> Any:
            recorder._record_run(executor, job.name)
            previous = getattr(recorder._local, "job", None)
            recorder._local.job = job.name
            try:
                return real_run(executor, job, work)
            finally:
                recorder._local.job = previous

        def take(executor: PreparationExecutor, item: Prepared[Any] | str, **kw: Any) -> Any:
            name = item if isinstance(item, str) else item.name
            if name in executor.pending:  # submitted, not cancelled: give it time to start
                recorder._event(executor, name).wait(GATE_S)
            with recorder._lock:
                recorder.takes.append(
                    Take(
                        executor.name,
                        id(executor),
                        name,
                        threading.current_thread().name,
                        time.perf_counter(),
                    )
                )
            return real_take(executor, item, **kw)

        def run_draw(draw: Any, generator: torch.Generator, **kw: Any) -> torch.Tensor:
            with recorder._lock:
                recorder.draws.append(
                    DrawRun(
                        draw.name,
                        threading.current_thread().name,
                        getattr(recorder._local, "job", None),
                        time.perf_counter(),
                    )
                )
            return real_draw(draw, generator, **kw)

        monkeypatch.setattr(PreparationExecutor, "_run", run)
        monkeypatch.setattr(PreparationExecutor, "take", take)
        monkeypatch.setattr(draws_module, "run_draw", run_draw)
        for module in draw_modules:  # modules that imported `run_draw` by name
            monkeypatch.setattr(module, "run_draw", run_draw)

    def _event(self, executor: PreparationExecutor, name: str) -> threading.Event:
        with self._lock:
            return self._started.setdefault((id(executor), name), threading.Event())

    def _record_run(self, executor: PreparationExecutor, name: str) -> None:
        run = JobRun(
            executor.name,
            id(executor),
            executor._thread_prefix,
            name,
            threading.current_thread().name,
            time.perf_counter(),
        )
        with self._lock:
            self.runs.append(run)
        self._event(executor, name).set()

    # -- queries ---------------------------------------------------------------------------------
    def executor_ids(self, executor: str) -> list[int]:
        """Ids of the executor instances named `executor` that ran a job, in first-run order."""
        return list(dict.fromkeys(r.executor_id for r in self.runs if r.executor == executor))

    def draws_in(self, job: str) -> list[str]:
        """Names of the draws made inside prepared job `job`, in order."""
        return [d.name for d in self.draws if d.job == job]

    def draws_outside_jobs(self) -> list[DrawRun]:
        """Draws made outside any prepared job (the serial path, fallbacks)."""
        return [d for d in self.draws if d.job is None]

    def assert_prepared_ahead(
        self, executor: str, jobs: Sequence[str], *, executor_id: int | None = None
    ) -> dict[str, tuple[JobRun, Take]]:
        """Exactly `jobs` were taken from `executor`: each ran once on one of its worker threads
        (never the consumer's), started before the consumer asked, and was taken once.

        With several instances of that name, `executor_id` picks one (else there must be one).
        """
        ids = self.executor_ids(executor) if executor_id is None else [executor_id]
        assert len(ids) == 1, f"expected one executor {executor!r} to run jobs, got {len(ids)}"
        (eid,) = ids
        runs = [r for r in self.runs if r.executor_id == eid]
        takes = [t for t in self.takes if t.executor_id == eid]
        assert [t.job for t in takes] == list(jobs), (takes, jobs)
        out: dict[str, tuple[JobRun, Take]] = {}
        for take in takes:
            (run,) = [r for r in runs if r.job == take.job]
            assert run.thread.startswith(run.thread_prefix), (run, "not on a worker thread")
            assert run.thread != take.thread, (run, take, "ran on the consumer's thread")
            assert run.start < take.asked, (run, take, "started only once asked for")
            out[take.job] = (run, take)
        return out
