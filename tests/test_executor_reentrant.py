"""A `take` from inside a job that could never return is refused, not left to hang."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from bitwise import bitwise_equal
from prenoise.observe.tracing import Tracer
from prenoise.preparation.draws import Draw, run_draw
from prenoise.preparation.executor import PreparationExecutor, PreparationStateError

WAIT_S = 10  # bounds only the failure case: a deadlocked take never sets the event


class WaitSignals(Tracer):
    """Sets `entered[name]` when a `take` starts waiting for `name` (its `wait:` span opens)."""

    def __init__(self, *names: str) -> None:
        super().__init__()
        self.entered = {name: threading.Event() for name in names}

    @contextmanager
    def span(self, name: str, category: str = "", **args: Any) -> Iterator[None]:
        with super().span(name, category, **args):
            event = self.entered.get(name.removeprefix("wait:"))
            if name.startswith("wait:") and event is not None:
                event.set()
            yield


def noise(seed: int) -> torch.Tensor:
    return run_draw(Draw("x", (64,)), torch.Generator().manual_seed(seed))


def capture(work: Callable[[], object], errors: list[BaseException], done: threading.Event):
    """A job body that records what `work` raised (and on which thread) instead of raising."""

    def job() -> str:
        try:
            work()
        except PreparationStateError as error:
            errors.append(error)
        finally:
            done.set()
        return threading.current_thread().name

    return job


def test_a_take_of_a_job_queued_behind_the_caller_raises() -> None:
    errors: list[BaseException] = []
    done = threading.Event()
    with PreparationExecutor(name="reentrant") as prep:

        def nested() -> object:
            return prep.take(prep.submit("inner", lambda: noise(4)))

        outer = prep.submit("outer", capture(nested, errors, done))
        assert done.wait(WAIT_S), "take() inside the one-worker executor's job blocked"
        worker = prep.take(outer)
        inner = prep.take("inner")  # the refused take left the job to its rightful taker
    assert worker.startswith("reentrant#") and worker.endswith("-0_0")
    assert [str(e) for e in errors] == [
        "take('inner') inside job 'outer' (worker lane 0 of 'reentrant') would wait forever: "
        "it needs 'inner' (lane 0), which cannot start until 'outer' returns. Take results on "
        "the thread that opened the executor and pass them to later work, or do the dependent "
        "work inside this job"
    ]
    assert bitwise_equal(inner, noise(4))


def test_a_job_taking_itself_raises() -> None:
    errors: list[BaseException] = []
    done = threading.Event()
    with PreparationExecutor(name="self") as prep:
        job = prep.submit("me", capture(lambda: prep.take("me"), errors, done))
        assert done.wait(WAIT_S)
        assert prep.take(job).startswith("self#")
    assert len(errors) == 1 and "needs 'me' (lane 0), which cannot start until 'me'" in str(
        errors[0]
    )


def test_a_cycle_of_waits_across_two_lanes_raises_in_the_job_that_closes_it() -> None:
    """'a' (lane 0) waits for 'b' (lane 1); 'b' then takes 'c', queued on lane 0 behind 'a'."""
    signals = WaitSignals("b")
    errors: list[BaseException] = []
    done = threading.Event()
    all_submitted = threading.Event()  # else 'a' may ask for 'b' before 'b' exists
    with PreparationExecutor(name="cycle", workers=2, tracer=signals) as prep:

        def take_b() -> object:
            assert all_submitted.wait(WAIT_S)
            return prep.take("b")

        def close_the_cycle() -> object:
            assert signals.entered["b"].wait(WAIT_S)
            return prep.take("c")

        a = prep.submit("a", take_b)  # lane 0
        prep.submit("b", capture(close_the_cycle, errors, done))  # lane 1
        prep.submit("c", lambda: noise(7))  # lane 0, behind 'a'
        all_submitted.set()
        assert done.wait(WAIT_S)
        b_thread = prep.take(a)  # 'a' got 'b''s result once 'b' gave up
        c = prep.take("c")
    assert b_thread.startswith("cycle#") and b_thread.endswith("-1_0")
    assert [str(e).split(" would wait forever: ")[1].split(", which")[0] for e in errors] == [
        "it needs 'c' (lane 0) -> 'b' (lane 1)"
    ]
    assert "inside job 'b' (worker lane 1 of 'cycle')" in str(errors[0])
    assert bitwise_equal(c, noise(7))


def test_takes_that_can_return_are_still_served_on_workers() -> None:
    """A finished job on the caller's lane, and a job on a free lane, are not deadlocks."""
    with PreparationExecutor(name="fine") as prep:
        prep.submit("first", lambda: noise(1))
        second = prep.submit("second", lambda: prep.take("first"))  # 'first' ran before it
        assert bitwise_equal(prep.take(second), noise(1))
    b_submitted = threading.Event()

    def take_b() -> torch.Tensor:
        assert b_submitted.wait(timeout=10)  # else 'a' may run before 'b' exists: not submitted
        return prep.take("b")

    with PreparationExecutor(name="fine2", workers=2) as prep:
        prep.submit("a", take_b)  # lane 0 waits for lane 1, which is free
        prep.submit("b", lambda: noise(2))
        b_submitted.set()
        assert bitwise_equal(prep.take("a"), noise(2))


def test_a_thread_of_another_executor_is_not_this_executors_worker() -> None:
    with PreparationExecutor(name="one") as one, PreparationExecutor(name="two") as two:
        one.submit("x", lambda: noise(3))
        job = two.submit("y", lambda: one.take("x"))  # waits on another executor's lane
        assert bitwise_equal(two.take(job), noise(3))
    with pytest.raises(PreparationStateError, match="after executor 'one' exited"):
        one.take("x")
