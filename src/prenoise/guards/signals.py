"""SIGTERM and SIGHUP unwind the main thread like Ctrl-C does.

Python's default action for both kills the process on the spot: no `finally`, no `except
BaseException` clean-up, so an MP4 being written stays behind as `.NAME.PID.partial.mp4`. With
:func:`install_termination_handlers` they raise :class:`Terminated` (a `SystemExit`) in the main
thread instead, and every clean-up path that handles Ctrl-C handles them too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["Terminated", "install_termination_handlers"]


class Terminated(SystemExit):
    """Raised in the main thread when a termination signal arrives; exit status 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        """`SIGTERM`, `SIGHUP`, …"""
        return signal.Signals(self.signum).name


def _raise_terminated(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(signum)


def install_termination_handlers() -> Callable[[], None]:
    """Make SIGTERM and SIGHUP raise :class:`Terminated`; returns a function that restores the
    previous handlers. Outside the main thread (where Python cannot set handlers) it does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    wanted = [signal.SIGTERM]
    if hasattr(signal, "SIGHUP"):
        wanted.append(signal.SIGHUP)
    previous = {signum: signal.signal(signum, _raise_terminated) for signum in wanted}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore
