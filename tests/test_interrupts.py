"""Ctrl-C and termination signals: attributed to the right thread, turned into clean-up."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from prenoise.guards.signals import Terminated, install_termination_handlers
from prenoise.preparation.executor import PreparationExecutor


def _main_thread_blocked_in_take() -> bool:
    """The main thread waits on a lock inside `PreparationExecutor.take`."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    if frame is None or frame.f_code.co_name != "wait":
        return False
    while frame is not None:
        if frame.f_code.co_name == "take" and frame.f_code.co_filename.endswith("executor.py"):
            return True
        frame = frame.f_back
    return False


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Python's own SIGINT handler for the test. A job started in the background (`cmd &` in a
    non-interactive shell, as some CI runners do) starts with SIGINT ignored, and Python then
    keeps it ignored: Ctrl-C would never raise."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_while_waiting_is_not_blamed_on_the_worker(ctrl_c_raises: None) -> None:
    release = threading.Event()

    def job() -> int:
        # Ctrl-C reaches the main thread once it is blocked in take() waiting for this job.
        for _ in range(30_000):
            if _main_thread_blocked_in_take():
                break
            time.sleep(0.001)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        release.wait(30)
        return 1

    with pytest.raises(KeyboardInterrupt) as info, PreparationExecutor() as prep:
        handle = prep.submit("noise", job)
        try:
            prep.take(handle)
        finally:
            release.set()
    notes = getattr(info.value, "__notes__", [])
    assert not any("worker thread" in note for note in notes), notes


def test_worker_exception_is_still_attributed_to_its_job() -> None:
    def job() -> int:
        raise KeyboardInterrupt  # raised on the worker: its note names the job

    with pytest.raises(KeyboardInterrupt) as info, PreparationExecutor() as prep:
        prep.take(prep.submit("noise", job))
    assert any("'noise' on a worker thread" in n for n in getattr(info.value, "__notes__", []))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_termination_signals_raise_terminated_then_handlers_are_restored(signum: int) -> None:
    before = signal.getsignal(signum)
    restore = install_termination_handlers()
    try:
        with pytest.raises(Terminated) as info:
            os.kill(os.getpid(), signum)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a bytecode boundary for the handler
        assert info.value.code == 128 + signum
        assert info.value.signal_name == signal.Signals(signum).name
    finally:
        restore()
    assert signal.getsignal(signum) == before
