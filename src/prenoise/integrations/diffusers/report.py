"""How one pipeline call ran (`CallReport`), and the integration's once-per-class log lines.

Logging (logger "prenoise.integrations.diffusers", messages prefixed "prenoise:"): each reason a
pipeline class runs the plain call is a warning, once per process; that overlap is active is
said once per class at INFO. Classic and modular pipeline calls share both.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from prenoise.integrations.diffusers.digests import NEXT_STEP
from prenoise.integrations.diffusers.plan import PlannedDraw

__all__ = [
    "CallReport",
    "first_time",
    "log_once",
    "say_active_once",
    "warn_left_plan_once",
]

logger = logging.getLogger("prenoise.integrations.diffusers")

_HINTS = {
    "generator-none": 'pass generator=torch.Generator("cpu").manual_seed(seed) to overlap it',
    "generator-default": 'pass generator=torch.Generator("cpu").manual_seed(seed) instead to '
    "overlap it (torch.manual_seed(seed) returns the default CPU generator)",
    "generator-device": "pass a CPU generator to overlap it (the output then follows the CPU "
    "generator's noise, as in the plain call with that generator)",
    "class": "prenoise.integrations.diffusers.supported() lists the classes with a plan",
    "changed-code": f"the output is the plain call's, bitwise; {NEXT_STEP}",
}
_logged: set[tuple[str, str]] = set()
_logged_lock = threading.Lock()


def first_time(pipeline: str, key: str) -> bool:
    with _logged_lock:
        if (pipeline, key) in _logged:
            return False
        _logged.add((pipeline, key))
        return True


def log_once(pipeline: str, key: str, message: str) -> None:
    """Warn that `pipeline` ran the plain call because of `message`, the first time `(pipeline,
    key)` is seen in this process."""
    if first_time(pipeline, key):
        hint = _HINTS.get(key)
        logger.warning(
            "prenoise: %s: noise not overlapped, plain call (%s)%s",
            pipeline,
            message,
            f"; {hint}" if hint else "",
        )


def say_active_once(pipeline: str, planned: Sequence[PlannedDraw]) -> None:
    if first_time(pipeline, "active"):
        labels = ", ".join(p.label for p in planned)
        logger.info("prenoise: %s: overlapped noise active (prepared draws: %s)", pipeline, labels)


@dataclass(frozen=True)
class CallReport:
    """How one call ran.

    `overlapped` is False when the plain call ran from the start (`reason` says why). `planned`
    lists the prepared draws, `served` how many the pipeline consumed, `left_plan` why the rest
    were discarded (the generators were set back; the output is the plain call's either way),
    and `wait_s` the request thread's time blocked on prepared draws. `stream` is the noise
    stream every draw of the call was made in (see `enable(pipe, stream=...)`); `raw_in_stream`
    counts the pipeline's own `torch.randn` draws made in it (`raw_draws.py`). `setup_s` is the
    request thread's time in prenoise before the pipeline's own call starts (planning, and for
    an overlapped call the executor's start and the submissions); `teardown_s` its time after
    the call returns (settling unconsumed draws, the executor's exit joining its worker). Times
    are seconds; `overhead_s` is their sum with `wait_s` and `step_wait_s`.

    Per-step sampler noise (`step_noise.StepLookahead`): `step_served` draws were prepared ahead
    and served, `step_unused` prepared and discarded, `step_left` says why the look-ahead ended
    before the loop did (None: it did not, or never started), `step_wait_s` is the request
    thread's time taking them (waits, the generator state check, the device move).
    `step_first_ahead` says whether the first per-step draw was among the served ones (it is
    prepared when the call can be seen to make it; else it is drawn plainly, not counted).
    """

    pipeline: str
    overlapped: bool
    reason: str | None = None
    planned: tuple[str, ...] = ()
    served: int = 0
    left_plan: str | None = None
    wait_s: float = 0.0
    stream: str = "native"
    setup_s: float = 0.0
    teardown_s: float = 0.0
    raw_in_stream: int = 0
    step_served: int = 0
    step_unused: int = 0
    step_left: str | None = None
    step_wait_s: float = 0.0
    step_first_ahead: bool = False

    @property
    def overhead_s(self) -> float:
        """The request thread's seconds spent in prenoise: set-up + waits + teardown."""
        return self.setup_s + self.wait_s + self.step_wait_s + self.teardown_s


def warn_left_plan_once(pipeline: str, served: int, planned: int, left: str | None) -> None:
    """Warn (once per class) that an overlapped call served only `served` of its `planned`
    prepared draws and discarded the rest because of `left` (nothing when `left` is None). The
    values are the plain call's either way: the discarded draws never reach the pipeline."""
    if left is not None and first_time(pipeline, "left-plan"):
        logger.warning(
            "prenoise: %s: %d of %d prepared draws served, the rest discarded (%s)",
            pipeline,
            served,
            planned,
            left,
        )
