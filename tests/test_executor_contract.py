"""Exact contract of `PreparationExecutor`: texts, spans, lanes, logs, env default, races."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
import torch

from bitwise import bitwise_equal, same_state
from prenoise.observe.tracing import Tracer
from prenoise.preparation.executor import PreparationExecutor, PreparationStateError
from prenoise.preparation.prediction import MismatchPolicy, PredictionMismatchError
from prenoise.verify.rng_guard import GlobalRNGChangedError

TIMEOUT_S = 10.0  # only a safety net: every wait below is released by an event


def exact(text: str) -> str:
    """A `match=` pattern for exactly `text`."""
    return f"^{re.escape(text)}$"


def mismatch_text(name: str, predicted: object, actual: object) -> str:
    return (
        f"prepared {name!r} was computed for predicted {predicted!r} but the actual value is "
        f"{actual!r}; the prepared result was discarded (fix the prediction, or use "
        "MismatchPolicy.FALLBACK to recompute serially)"
    )


def _nothing() -> None:
    pass


class HookTracer(Tracer):
    """A `Tracer` that runs a callback as a named span opens (`on_enter`) or closes (`on_exit`)."""

    def __init__(
        self,
        *,
        on_enter: dict[str, Callable[[], object]] | None = None,
        on_exit: dict[str, Callable[[], object]] | None = None,
    ) -> None:
        super().__init__()
        self.on_enter = on_enter or {}
        self.on_exit = on_exit or {}

    @contextmanager
    def span(self, name: str, category: str = "", **args: Any) -> Iterator[None]:
        self.on_enter.get(name, _nothing)()
        with super().span(name, category, **args):
            yield
        self.on_exit.get(name, _nothing)()


class NoNotesError(RuntimeError):
    """An exception without `add_note`, as every exception is before Python 3.11."""

    def __getattribute__(self, name: str) -> Any:
        if name == "add_note":
            raise AttributeError(name)
        return super().__getattribute__(name)


@pytest.fixture
def first_cancel(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once a future is cancelled: a running job that waits for it outlasts the
    cancellation of the pending jobs at exit."""
    cancelled = threading.Event()
    real_cancel = Future.cancel

    def cancel(self: Future[Any]) -> bool:
        done = real_cancel(self)
        if done:
            cancelled.set()
        return done

    monkeypatch.setattr(Future, "cancel", cancel)
    return cancelled


@pytest.fixture
def restore_global_rng() -> Iterator[None]:
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)


def test_usage_error_texts() -> None:
    with pytest.raises(ValueError, match=exact("workers must be an int >= 1, got 0")):
        PreparationExecutor(workers=0)
    started, release = threading.Event(), threading.Event()
    prep = PreparationExecutor(name="texts")
    with prep:
        with pytest.raises(
            PreparationStateError, match=exact("executor 'texts' cannot be entered twice")
        ):
            prep.__enter__()
        prep.submit("noise", lambda: 1)
        assert prep.take("noise") == 1
        with pytest.raises(
            PreparationStateError, match=exact("'noise' was already taken from 'texts'")
        ):
            prep.take("noise")
        with pytest.raises(
            PreparationStateError, match=exact("'other' was never submitted to 'texts'")
        ):
            prep.take("other")
        with pytest.raises(
            PreparationStateError, match=exact("'noise' was already submitted to 'texts'")
        ):
            prep.submit("noise", lambda: 2)
        prep.submit("running", lambda: started.set() or release.wait(TIMEOUT_S))
        prep.submit("later", lambda: 3)
        assert started.wait(TIMEOUT_S)
        assert prep.cancel_pending() == ["later"]
        with pytest.raises(
            PreparationStateError, match=exact("'later' was cancelled before it ran")
        ):
            prep.take("later")
        with pytest.raises(
            PreparationStateError, match=exact("'later' was already submitted to 'texts'")
        ):
            prep.submit("later", lambda: 3)
        release.set()
        assert prep.take("running") is True
        prep.submit("cond", lambda: 4, predicted=(1, 2))
        with pytest.raises(
            PreparationStateError,
            match=exact(
                "'cond' was prepared for predicted (1, 2); take() needs actual= to confirm it"
            ),
        ):
            prep.take("cond")
    with pytest.raises(
        PreparationStateError, match=exact("submit('late') outside the executor's `with` block")
    ):
        prep.submit("late", lambda: 5)
    with pytest.raises(
        PreparationStateError,
        match=exact("take('noise') after executor 'texts' exited; results are released at exit"),
    ):
        prep.take("noise")
    # an executor is single-use: entering it again after its exit is refused too
    with pytest.raises(
        PreparationStateError, match=exact("executor 'texts' cannot be entered twice")
    ):
        prep.__enter__()
    assert not prep.threads


def test_closing_a_never_entered_executor_is_a_no_op() -> None:
    prep = PreparationExecutor(name="unused", check_global_rng=True)
    with ExitStack() as stack:
        stack.push(prep)  # registers `prep.__exit__` without entering it
    assert prep.cancel_event.is_set()
    assert prep.pending == [] and prep.threads == []


def test_generators_owned_by_two_lanes_are_refused() -> None:
    g0, g1 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    with PreparationExecutor(name="lanes", workers=2) as prep:
        prep.submit("on0", lambda: torch.randn(3, generator=g0), generators=[g0])
        prep.submit("on1", lambda: torch.randn(3, generator=g1), generators=[g1])
        with pytest.raises(
            PreparationStateError,
            match=exact("'both' uses generators owned by different worker lanes [0, 1]"),
        ):
            prep.submit("both", lambda: None, generators=[g1, g0])
        assert prep.pending == ["on0", "on1"]
        got = [prep.take("on0"), prep.take("on1")]
    expected = [torch.randn(3, generator=torch.Generator().manual_seed(s)) for s in (0, 1)]
    assert all(bitwise_equal(a, b) for a, b in zip(got, expected, strict=True))


def test_spans_names_categories_and_round_robin_lanes() -> None:
    tracer = Tracer()
    with PreparationExecutor(name="traced", workers=3, tracer=tracer) as prep:
        for name in ("a", "b", "c"):
            prep.submit(name, lambda name=name: name)
        assert [prep.take(name) for name in ("a", "b", "c")] == ["a", "b", "c"]
        prep.submit("cond", lambda: "prepared", predicted=1)
        got = prep.take(
            "cond", actual=2, policy=MismatchPolicy.FALLBACK, recompute=lambda: "recomputed"
        )
        assert got == "recomputed"
    request = threading.current_thread().name

    def where(thread_name: str) -> str:
        if thread_name == request:
            return "request"
        lane = re.fullmatch(r"traced#\d+-(\d+)_0", thread_name)
        assert lane is not None, thread_name
        return f"lane{lane[1]}"

    assert sorted((s.name, s.category, where(s.thread_name)) for s in tracer.spans) == [
        ("a", "prepare", "lane0"),
        ("b", "prepare", "lane1"),
        ("c", "prepare", "lane2"),
        ("cond", "prepare", "lane0"),  # round robin wraps around
        ("recompute:cond", "noise", "request"),
        ("wait:a", "wait", "request"),
        ("wait:b", "wait", "request"),
        ("wait:c", "wait", "request"),
        ("wait:cond", "wait", "request"),
    ]


def test_mismatch_raises_with_raise_policy_or_without_recompute() -> None:
    recomputed: list[str] = []
    with PreparationExecutor() as prep:
        prep.submit("cond", lambda: "prepared", predicted=(1, 64))
        with pytest.raises(
            PredictionMismatchError, match=exact(mismatch_text("cond", (1, 64), (2, 64)))
        ) as info:
            prep.take("cond", actual=(2, 64), recompute=lambda: recomputed.append("raise"))
        assert (info.value.name, info.value.predicted, info.value.actual) == (
            "cond",
            (1, 64),
            (2, 64),
        )
        prep.submit("cond2", lambda: "prepared", predicted=(1, 64))
        with pytest.raises(
            PredictionMismatchError, match=exact(mismatch_text("cond2", (1, 64), (3, 64)))
        ):
            prep.take("cond2", actual=(3, 64), policy=MismatchPolicy.FALLBACK)
    assert recomputed == [] and prep.prediction_events == []


def test_fallback_refuses_to_rewind_a_generator_that_later_jobs_used() -> None:
    g, g_ref = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    recomputed: list[str] = []
    with PreparationExecutor() as prep:
        prep.submit("first", lambda: torch.randn(4, generator=g), predicted=(4,), generators=[g])
        prep.submit("second", lambda: torch.randn(8, generator=g), generators=[g])
        with pytest.raises(
            PredictionMismatchError, match=exact(mismatch_text("first", (4,), (5,)))
        ) as info:
            prep.take(
                "first",
                actual=(5,),
                policy=MismatchPolicy.FALLBACK,
                recompute=lambda: recomputed.append("first"),
            )
        assert (info.value.name, info.value.predicted, info.value.actual) == ("first", (4,), (5,))
        second = prep.take("second")
    torch.randn(4, generator=g_ref)
    assert bitwise_equal(second, torch.randn(8, generator=g_ref))
    assert same_state(g, g_ref)  # never rewound
    assert recomputed == [] and prep.prediction_events == []


def test_fallback_take_in_flight_while_another_thread_exits_is_refused() -> None:
    """The taker got its result; the context exits (and forgets which jobs came later on each
    generator) before the taker checks the key: FALLBACK is refused, nothing is rewound."""
    g, g_ref = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    waited, exited = threading.Event(), threading.Event()

    def hold_taker() -> None:
        waited.set()
        exited.wait(TIMEOUT_S)

    outcome: list[object] = []
    recomputed: list[int] = []
    prep = PreparationExecutor(tracer=HookTracer(on_exit={"wait:cond": hold_taker}))

    def recompute() -> torch.Tensor:
        recomputed.append(1)
        return torch.randn(5, generator=g)

    def taker() -> None:
        try:
            outcome.append(
                prep.take("cond", actual=(5,), policy=MismatchPolicy.FALLBACK, recompute=recompute)
            )
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=taker)
    with prep:
        prep.submit("cond", lambda: torch.randn(3, generator=g), predicted=(3,), generators=[g])
        thread.start()
        assert waited.wait(TIMEOUT_S)
    exited.set()
    thread.join(TIMEOUT_S)
    (error,) = outcome
    assert type(error) is PreparationStateError
    assert str(error) == (
        "take('cond'): executor 'prenoise-prep' exited while the result was awaited; "
        "a mismatched prediction can no longer fall back"
    )
    torch.randn(3, generator=g_ref)
    assert same_state(g, g_ref)  # drawn once by the job, never rewound
    assert recomputed == [] and prep.prediction_events == []


def test_take_waiting_across_exit_is_told_the_job_was_cancelled() -> None:
    """Another thread waits for a queued job when the context exits: the job is cancelled, never
    runs, and the waiter is told so by name (no note blaming a worker)."""
    waiting, taker_done, started = threading.Event(), threading.Event(), threading.Event()
    ran: list[str] = []
    outcome: list[object] = []
    prep = PreparationExecutor(tracer=HookTracer(on_enter={"wait:queued": waiting.set}))

    def running() -> str:
        started.set()
        taker_done.wait(TIMEOUT_S)  # the lane stays busy until the waiter got its answer
        return "running"

    def queued() -> str:
        ran.append("queued")
        return "queued"

    def taker() -> None:
        try:
            outcome.append(prep.take("queued"))
        except BaseException as error:
            outcome.append(error)
        finally:
            taker_done.set()

    thread = threading.Thread(target=taker)
    with prep:
        prep.submit("running", running)
        prep.submit("queued", queued)
        assert started.wait(TIMEOUT_S)
        thread.start()
        assert waiting.wait(TIMEOUT_S)
    thread.join(TIMEOUT_S)
    (error,) = outcome
    assert type(error) is PreparationStateError, error
    assert str(error) == (
        "'queued' was cancelled before it ran: executor 'prenoise-prep' exited while take() "
        "waited for it"
    )
    assert not hasattr(error, "__notes__")
    assert error.__cause__ is None and error.__suppress_context__
    assert ran == [] and not prep.threads


@pytest.mark.parametrize("job_fails", [False, True])
def test_interrupt_while_waiting_is_not_attributed_to_the_job(
    monkeypatch: pytest.MonkeyPatch, job_fails: bool
) -> None:
    """Ctrl-C lands in the waiting thread just as the job finished: the interrupt is not the
    job's exception, so it propagates without a note."""

    def job() -> str:
        if job_fails:
            raise ValueError("job failed")
        return "done"

    def interrupted_result(self: Future[Any], timeout: float | None = None) -> Any:
        self.exception(timeout)  # waits until the job has finished (or failed)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info, PreparationExecutor() as prep:
        handle = prep.submit("noise", job)
        with monkeypatch.context() as patch:
            patch.setattr(Future, "result", interrupted_result)
            prep.take(handle)
    assert not hasattr(info.value, "__notes__")
    assert info.value.__context__ is None


def test_notes_name_the_job_and_the_cancelled_work(first_cancel: threading.Event) -> None:
    started = threading.Event()

    def failing() -> None:
        raise ValueError("worker failed")

    with PreparationExecutor() as prep:
        prep.submit("noise", failing)
        with pytest.raises(ValueError) as info:
            prep.take("noise")
    assert str(info.value) == "worker failed"
    assert info.value.__notes__ == ["prenoise: raised by prepared job 'noise' on a worker thread"]
    with pytest.raises(KeyError) as body, PreparationExecutor() as prep:
        prep.submit("running", lambda: started.set() or first_cancel.wait(TIMEOUT_S))
        prep.submit("pending", lambda: None)
        assert started.wait(TIMEOUT_S)
        raise KeyError("encoder")
    assert body.value.__notes__ == ["prenoise: cancelled pending preparation ['pending']"]


def test_exceptions_without_add_note_propagate_unchanged(first_cancel: threading.Event) -> None:
    started = threading.Event()

    def failing() -> None:
        raise NoNotesError("no notes here")

    with PreparationExecutor() as prep:
        prep.submit("noise", failing)
        with pytest.raises(NoNotesError, match=exact("no notes here")) as info:
            prep.take("noise")
    assert not hasattr(info.value, "__notes__") and info.value.__context__ is None
    with pytest.raises(NoNotesError, match=exact("body")) as body, PreparationExecutor() as prep:
        prep.submit("running", lambda: started.set() or first_cancel.wait(TIMEOUT_S))
        prep.submit("pending", lambda: None)
        assert started.wait(TIMEOUT_S)
        raise NoNotesError("body")
    assert not hasattr(body.value, "__notes__") and body.value.__context__ is None


def test_untaken_failed_jobs_are_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="prenoise.preparation.executor")
    ran = threading.Event()

    def failing() -> None:
        ran.set()
        raise ValueError("boom")

    with PreparationExecutor() as prep:
        prep.submit("good", lambda: "fine")
        prep.submit("bad", failing)
        assert ran.wait(TIMEOUT_S)  # both ran (one lane, in order); neither is taken
    records = [r for r in caplog.records if r.name == "prenoise.preparation.executor"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.DEBUG, "untaken job 'bad' failed: ValueError('boom')")
    ]


@pytest.mark.usefixtures("restore_global_rng")
@pytest.mark.parametrize(
    ("env", "argument", "checks"),
    [
        (None, None, False),
        ("0", None, False),
        ("1", None, True),
        ("1", False, False),
        (None, True, True),
    ],
)
def test_global_rng_check_default_comes_from_prenoise_debug_rng(
    monkeypatch: pytest.MonkeyPatch, env: str | None, argument: bool | None, checks: bool
) -> None:
    for variable in ("PRENOISE_DEBUG_RNG", "prenoise_debug_rng"):
        monkeypatch.delenv(variable, raising=False)
    if env is not None:
        monkeypatch.setenv("PRENOISE_DEBUG_RNG", env)
    prep = PreparationExecutor(name="rng", check_global_rng=argument)
    assert prep.check_global_rng is checks
    with ExitStack() as stack:
        if checks:
            stack.enter_context(
                pytest.raises(
                    GlobalRNGChangedError,
                    match=exact("preparation executor 'rng': global RNG changed: ['cpu']"),
                )
            )
        with prep:
            torch.randn(2)  # the global RNG, on the request thread


def test_prenoise_debug_rng_follows_the_start_up_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `prenoise.guards.env` accepts at start-up means the same here (' 1' was off here)."""
    from prenoise.guards.env import EnvVarError

    monkeypatch.setenv("PRENOISE_DEBUG_RNG", " 1")
    assert PreparationExecutor(name="rng").check_global_rng is True
    monkeypatch.setenv("PRENOISE_DEBUG_RNG", "maybe")
    with pytest.raises(EnvVarError, match="PRENOISE_DEBUG_RNG='maybe' is not a known value"):
        PreparationExecutor(name="rng")
    assert PreparationExecutor(name="rng", check_global_rng=False).check_global_rng is False
