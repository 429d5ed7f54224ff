"""The request-owned preparation executor.

One request opens a `PreparationExecutor`, submits work (noise draws) before its encoders run,
and takes each result once when it needs it:

    with PreparationExecutor() as prep:
        video = prep.submit("video_noise", lambda: run_stream(video_stream))
        text = encode_text(prompt)              # runs while the worker draws
        noise = prep.take(video)                # blocks; ownership passes to the caller

Guarantees:
- `submit` returns at once; work runs on worker threads owned by this context (default one).
  Work that names its generators (`generators=`) always runs on the lane that owns them, so two
  threads never use one generator.
- `take` returns the work's result (a worker exception is re-raised with its original type and
  traceback), hands it to the caller and keeps no reference: a second `take` is an error.
- If the body raises, pending work is cancelled, running work is joined and the ORIGINAL
  exception propagates; errors of cancelled or joined work never mask it.
- On exit no worker thread is left and untaken results are released. Running work that polls
  `cancel_event` (e.g. `run_stream(..., cancel=prep.cancel_event)`) stops at its next cancel
  point, so an exit (an exception, Ctrl-C, SIGTERM) does not wait for a whole draw.
- Prepared work tied to a predicted key is only handed out after the actual key is confirmed
  (see `prenoise.preparation.prediction`).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Callable, Collection, Hashable, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, TypeVar

import torch

from prenoise.guards.cancel import CancelEvent, any_of
from prenoise.guards.env import env_choice
from prenoise.observe.tracing import NULL_TRACER, Category, Tracer
from prenoise.preparation.prediction import MismatchPolicy, PredictionEvent, PredictionMismatchError
from prenoise.verify.rng_guard import GlobalRNGChangedError, RNGSnapshot, snapshot_global_rng

__all__ = ["PreparationExecutor", "PreparationStateError", "Prepared"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
logger = logging.getLogger("prenoise.preparation.executor")
_UNSET: Any = object()
_instance_ids = itertools.count()


class PreparationStateError(RuntimeError):
    """The executor was used out of order (unknown name, second take, use after exit, or a
    `take` from inside a job that would wait forever for a job queued behind it)."""


@dataclass(frozen=True)
class Prepared(Generic[T_co]):
    """A typed handle to submitted work; pass it (or its name) to `take`."""

    name: str


@dataclass
class _Job:
    name: str
    predicted: Hashable
    generators: tuple[torch.Generator, ...]
    lane: int
    future: Future[Any] = field(init=False)
    start_states: list[torch.Tensor] = field(default_factory=list)


@dataclass(frozen=True)
class _Wait:
    """A worker lane blocked in `take`: the job it awaits (a lane runs one job at a time)."""

    name: str
    lane: int
    future: Future[Any]


class PreparationExecutor:
    """Request-owned worker threads that prepare inputs while the request thread encodes.

    `workers` lanes (default 1), each a single thread. `tracer` records a span per job and per
    wait. `check_global_rng` (default: env `PRENOISE_DEBUG_RNG=1`) raises
    `GlobalRNGChangedError` at a normal exit if the global RNG state changed inside the context.
    `cancel` (an event) is folded into `cancel_event`, which is also set when the context exits.
    """

    def __init__(
        self,
        *,
        workers: int = 1,
        name: str = "prenoise-prep",
        tracer: Tracer | None = None,
        check_global_rng: bool | None = None,
        cancel: CancelEvent | None = None,
    ) -> None:
        if type(workers) is not int or workers < 1:  # `True` is an int, but not a count
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        self.name = name
        self._thread_prefix = f"{name}#{next(_instance_ids)}-"
        self.tracer = tracer or NULL_TRACER
        self.check_global_rng = (
            env_choice("PRENOISE_DEBUG_RNG", ("0", "1"), "0") == "1"  # the start-up check's rule
            if check_global_rng is None
            else check_global_rng
        )
        self.prediction_events: list[PredictionEvent] = []
        self._workers = workers
        self._lanes: list[ThreadPoolExecutor] = []
        self._jobs: dict[str, _Job] = {}
        self._taken: set[str] = set()
        self._cancelled: set[str] = set()
        # id(generator) -> (generator, lane, name of the last job that uses it)
        self._generator_owner: dict[int, tuple[torch.Generator, int, str]] = {}
        self._next_lane = 0
        self._rng_before: RNGSnapshot | None = None
        self._open = False
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # The job the current thread runs, when it is one of this executor's workers.
        self._running = threading.local()
        # lane -> the job that lane's worker waits for in `take` (a wait-for graph of lanes).
        self._waits: dict[int, _Wait] = {}
        self._exiting = threading.Event()
        self._cancel_event = any_of(self._exiting, cancel)

    @property
    def cancel_event(self) -> CancelEvent:
        """Set once the context exits (or the constructor's `cancel` is set): pass it to work."""
        assert self._cancel_event is not None
        return self._cancel_event

    # -- context -----------------------------------------------------------------------------
    def __enter__(self) -> PreparationExecutor:
        if self._open or self._lanes:
            raise PreparationStateError(f"executor {self.name!r} cannot be entered twice")
        self._lanes = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self._thread_prefix}{i}")
            for i in range(self._workers)
        ]
        self._rng_before = snapshot_global_rng() if self.check_global_rng else None
        self._pid = os.getpid()
        self._open = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        cancelled = self._shutdown()
        if exc is not None:
            if cancelled:
                _add_note(exc, f"prenoise: cancelled pending preparation {cancelled}")
            return  # the original exception propagates unchanged
        if self._rng_before is not None:
            changed = self._rng_before.differences(snapshot_global_rng())
            if changed:
                raise GlobalRNGChangedError(
                    f"preparation executor {self.name!r}: global RNG changed: {changed}"
                )

    def _shutdown(self) -> list[str]:
        """Cancel pending jobs, join running ones, drop every result; returns cancelled names."""
        self._exiting.set()  # running work that polls `cancel_event` stops at its next point
        with self._lock:
            self._open = False
            jobs, self._jobs = list(self._jobs.values()), {}
        cancelled = [job.name for job in jobs if job.future.cancel()]
        for lane in self._lanes:
            lane.shutdown(wait=True, cancel_futures=True)
        for job in jobs:
            if not job.future.cancelled() and job.future.exception() is not None:
                logger.debug("untaken job %r failed: %r", job.name, job.future.exception())
        with self._lock:
            self._generator_owner.clear()
        return cancelled

    # -- work ------------------------------------------------------------------------------
    def submit(
        self,
        name: str,
        work: Callable[[], T],
        *,
        predicted: Hashable = None,
        generators: Sequence[torch.Generator] = (),
    ) -> Prepared[T]:
        """Schedule `work()` on a worker and return at once.

        `predicted` ties the result to a key (e.g. the shapes it was drawn for) that `take` must
        confirm. `generators` names the caller-owned generators the work advances: it then runs
        on the lane that owns them, and a FALLBACK recomputation can rewind them.
        """
        if not self._open:
            raise PreparationStateError(f"submit({name!r}) outside the executor's `with` block")
        self._refuse_forked(f"submit({name!r})")
        with self._lock:
            if name in self._jobs or name in self._taken or name in self._cancelled:
                raise PreparationStateError(f"{name!r} was already submitted to {self.name!r}")
            lane = self._lane_for(name, tuple(generators))
            job = _Job(name, predicted, tuple(generators), lane)
            job.future = self._lanes[lane].submit(self._run, job, work)
            self._jobs[name] = job
        return Prepared(name)

    def _lane_for(self, name: str, generators: tuple[torch.Generator, ...]) -> int:
        owned = {
            self._generator_owner[id(g)][1] for g in generators if id(g) in self._generator_owner
        }
        if len(owned) > 1:
            raise PreparationStateError(
                f"{name!r} uses generators owned by different worker lanes {sorted(owned)}"
            )
        if owned:
            lane = owned.pop()
        else:
            lane, self._next_lane = self._next_lane, (self._next_lane + 1) % len(self._lanes)
        for g in generators:
            self._generator_owner[id(g)] = (g, lane, name)
        return lane

    def _run(self, job: _Job, work: Callable[[], T]) -> T:
        job.start_states = [g.get_state() for g in job.generators]
        self._running.job = job
        try:
            with self.tracer.span(job.name, Category.PREPARE):
                return work()
        finally:
            self._running.job = None

    def _deadlock(self, awaited: str, job: _Job) -> str | None:
        """Why waiting for `job` from this thread would block forever, or None.

        Call with the lock held. Only a worker of this executor can deadlock it: its lane runs one
        job at a time, so a job queued on the lane it occupies never starts while it waits. The
        same holds through other lanes whose workers are themselves blocked in `take` on jobs
        that are not done (a cycle of waits). A done job never blocks, so a finished wait that is
        still registered cannot make this report a deadlock that is not one.
        """
        current: _Job | None = getattr(self._running, "job", None)
        if current is None:
            return None
        chain = [f"{awaited!r} (lane {job.lane})"]
        lane, future = job.lane, job.future
        seen: set[int] = set()
        while not future.done():
            if lane == current.lane:
                return " -> ".join(chain)
            if lane in seen:
                return None  # a cycle that does not pass through this lane: not ours to report
            seen.add(lane)
            wait = self._waits.get(lane)
            if wait is None:
                return None  # that lane's worker is free to reach the awaited job
            chain.append(f"{wait.name!r} (lane {wait.lane})")
            lane, future = wait.lane, wait.future
        return None

    def take(
        self,
        item: Prepared[T] | str,
        *,
        actual: Hashable = _UNSET,
        policy: MismatchPolicy = MismatchPolicy.RAISE,
        recompute: Callable[[], T] | None = None,
    ) -> T:
        """Block for a result and hand it over; the executor keeps no reference to it.

        If the work was submitted with `predicted`, `actual` must be given: equal keys release
        the prepared result; a mismatch discards it and either raises `PredictionMismatchError`
        (RAISE) or rewinds the job's generators, calls `recompute()` on this thread and records
        a `PredictionEvent` (FALLBACK). A worker exception is re-raised here.
        """
        name = item if isinstance(item, str) else item.name
        if not self._open:
            raise PreparationStateError(
                f"take({name!r}) after executor {self.name!r} exited; results are released at exit"
            )
        self._refuse_forked(f"take({name!r})")
        with self._lock:
            job = self._jobs.get(name)
            if job is None:
                if name in self._taken:
                    raise PreparationStateError(f"{name!r} was already taken from {self.name!r}")
                if name in self._cancelled:
                    raise PreparationStateError(f"{name!r} was cancelled before it ran")
                raise PreparationStateError(f"{name!r} was never submitted to {self.name!r}")
            self._refuse_deadlock(name, job)  # before the pop: the job stays takeable
            del self._jobs[name]
            self._taken.add(name)
            waiter = self._register_wait(name, job)
        future = job.future
        del job.future  # an exception's traceback keeps `job` alive: it must not pin the result
        with self.tracer.span(f"wait:{name}", Category.WAIT):
            try:
                result = future.result()
            except CancelledError:
                if not future.cancelled():
                    raise
                # Only the exit cancels a job that was submitted and not yet taken.
                raise PreparationStateError(
                    f"{name!r} was cancelled before it ran: executor {self.name!r} exited "
                    "while take() waited for it"
                ) from None
            except BaseException as error:
                # Only the job's own exception came from the worker: a KeyboardInterrupt (or a
                # signal handler's exception) raised in this thread while it waited did not.
                if future.done() and not future.cancelled() and future.exception() is error:
                    _add_note(
                        error, f"prenoise: raised by prepared job {name!r} on a worker thread"
                    )
                raise
            finally:
                del future
                self._unregister_wait(waiter)
        if job.predicted is None:
            return result
        if actual is _UNSET:
            del result
            raise PreparationStateError(
                f"{name!r} was prepared for predicted {job.predicted!r}; "
                "take() needs actual= to confirm it"
            )
        if actual == job.predicted:
            return result
        del result
        if policy is MismatchPolicy.RAISE or recompute is None:
            raise PredictionMismatchError(name, job.predicted, actual)
        with self._lock:
            if not self._open:
                # The exit forgot which jobs came later on these generators: rewinding blind
                # could replay values a later job already handed out.
                raise PreparationStateError(
                    f"take({name!r}): executor {self.name!r} exited while the result was "
                    "awaited; a mismatched prediction can no longer fall back"
                )
            later = [g for g in job.generators if self._generator_owner[id(g)][2] != name]
        if later:
            # Later jobs drew from these generators after this one: rewinding would corrupt them.
            raise PredictionMismatchError(name, job.predicted, actual)
        for generator, state in zip(job.generators, job.start_states, strict=True):
            generator.set_state(state)
        event = PredictionEvent(name, job.predicted, actual)
        event.log()
        self.prediction_events.append(event)
        with self.tracer.span(f"recompute:{name}", Category.NOISE):
            return recompute()

    def _refuse_forked(self, call: str) -> None:
        """A forked child has none of the workers (threads do not survive `fork`): its `take`
        would wait forever."""
        if os.getpid() != self._pid:
            raise PreparationStateError(
                f"{call} in process {os.getpid()}, a child forked from {self._pid} where executor "
                f"{self.name!r} was opened: its worker threads do not exist here; open an "
                "executor in the child"
            )

    def _refuse_deadlock(self, name: str, job: _Job) -> None:
        """Raise `PreparationStateError` if this `take` could never return (lock held)."""
        chain = self._deadlock(name, job)
        if chain is None:
            return
        current: _Job = self._running.job
        raise PreparationStateError(
            f"take({name!r}) inside job {current.name!r} (worker lane {current.lane} of "
            f"{self.name!r}) would wait forever: it needs {chain}, which cannot start until "
            f"{current.name!r} returns. Take results on the thread that opened the executor and "
            "pass them to later work, or do the dependent work inside this job"
        )

    def _register_wait(self, name: str, job: _Job) -> int | None:
        """Record that this worker's lane waits for `job` (lock held); returns the lane."""
        current: _Job | None = getattr(self._running, "job", None)
        if current is None:
            return None
        self._waits[current.lane] = _Wait(name, job.lane, job.future)
        return current.lane

    def _unregister_wait(self, lane: int | None) -> None:
        if lane is not None:
            with self._lock:
                self._waits.pop(lane, None)

    def cancel_pending(self, names: Collection[str] | None = None) -> list[str]:
        """Cancel jobs that have not started (of `names` only, when given); returns their names
        (they can no longer be taken)."""
        with self._lock:
            cancelled = [
                n
                for n, job in self._jobs.items()
                if (names is None or n in names) and job.future.cancel()
            ]
            for n in cancelled:
                del self._jobs[n]
            self._cancelled.update(cancelled)
        return cancelled

    @property
    def pending(self) -> list[str]:
        """Names submitted but not yet taken."""
        with self._lock:
            return list(self._jobs)

    @property
    def threads(self) -> list[threading.Thread]:
        """Live worker threads of this executor."""
        prefix = self._thread_prefix
        return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def _add_note(error: BaseException, note: str) -> None:
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(note)
