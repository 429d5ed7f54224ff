"""How long a test waits for a process, a server or a job: one ceiling, which only a hang reaches.

These waits bound a failure, never a pass: on a slow or loaded machine a test must be slow and
green, not fail on its own deadline (at load ~11 on 2 cores, `prenoise serve` took longer than
60 s to come up and `prenoise doctor` longer than 120 s to run). So every readiness wait and
subprocess timeout in the tests is `READY_CEILING_S`, and a wait that can see the process exit or
the job fail still stops at once (it checks that on every poll, as before).

`PRENOISE_TEST_WAIT_S` (seconds) sets another ceiling, e.g. a short one to find a hang quickly.
No test asserts a duration with this value. Not waits in this sense, and left as written: the
timeouts a test exercises (a server's body timeout, a rank's collective timeout, a step's time
limit), and the handshakes between threads of the test process (`threading.Event.wait` of an
executor test, `overlap.GATE_S`): they wait for a thread to be scheduled, not for work to be
done, and some are meant to run out under the bug they catch.
"""

from __future__ import annotations

import math
import os
import time

WAIT_ENV = "PRENOISE_TEST_WAIT_S"
DEFAULT_CEILING_S = 1200.0


def _ceiling() -> float:
    text = os.environ.get(WAIT_ENV, "").strip()
    if not text:
        return DEFAULT_CEILING_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{WAIT_ENV}={text!r}: expected a finite number of seconds > 0")
    return value


READY_CEILING_S = _ceiling()
"""The most any readiness wait or subprocess in the tests waits (20 min unless overridden)."""


def deadline() -> float:
    """`time.monotonic()` at which a wait starting now gives up: poll with `before(deadline)`."""
    return time.monotonic() + READY_CEILING_S


def before(at: float) -> bool:
    """Whether the deadline `at` (from `deadline()`) is still ahead."""
    return time.monotonic() < at
