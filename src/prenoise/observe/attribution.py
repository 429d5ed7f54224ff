"""What a serial-vs-overlapped timing difference can be credited to.

prenoise moves noise off the request thread; that, and only that, is its saving. The preparation
window of two runs also differs by whatever else varied between them — mostly the encoders (a
warm cache, another process on the cores, thread wake-ups). A window that shrank by much more
than the noise moved is that variation ("encoder drift"), not prenoise, and must be flagged, never
reported as a saving; a window that grew by much more than the worker's drawing could cost is
flagged the same way ("timing noise"). `prenoise verify` (one run per arm) and `prenoise bench`
(per pair) both say what they measured through :class:`WindowAttribution`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DRIFT_MARGIN_FRACTION", "DRIFT_MARGIN_S", "Timing", "WindowAttribution"]

DRIFT_MARGIN_S = 0.020
"""Window shortening beyond the noise moved that is still not called drift (timer and scheduling
jitter of one request on a busy machine)."""
DRIFT_MARGIN_FRACTION = 0.25
"""…plus this share of the noise moved (moving noise can also save a little cache or
allocator work beside the draw itself)."""


@dataclass(frozen=True)
class WindowAttribution:
    """One comparison of a serial and an overlapped run (or the medians of pairs), in seconds.

    `noise_moved_s`: noise time on the request thread, serial minus overlapped;
    `window_saved_s`: preparation window, serial minus overlapped (negative: overlapped longer).
    """

    noise_moved_s: float
    window_saved_s: float

    @classmethod
    def from_arms(
        cls, serial_noise_s: float, overlapped_noise_s: float, serial_window_s: float,
        overlapped_window_s: float,
    ) -> WindowAttribution:  # fmt: skip
        """From each arm's noise on the request thread and preparation window."""
        return cls(serial_noise_s - overlapped_noise_s, serial_window_s - overlapped_window_s)

    @property
    def margin_s(self) -> float:
        """How far the window may shrink beyond the noise moved before it is called drift."""
        return DRIFT_MARGIN_S + DRIFT_MARGIN_FRACTION * max(self.noise_moved_s, 0.0)

    @property
    def unexplained_s(self) -> float:
        """Window shortening the noise moved does not explain (negative: less than it)."""
        return self.window_saved_s - max(self.noise_moved_s, 0.0)

    @property
    def drift(self) -> bool:
        """The window shrank by more than the noise moved plus the margin: not prenoise's."""
        return self.unexplained_s > self.margin_s

    @property
    def noisy(self) -> bool:
        """The window grew by more than the noise moved plus the margin. The worker's drawing can
        slow the encoders by about what it draws (cores shared), not more: the rest is other
        work on the machine, so neither arm's timing can be trusted."""
        return -self.window_saved_s > max(self.noise_moved_s, 0.0) + self.margin_s

    def sentence(self) -> str:
        """One line saying what was measured and what of it is prenoise's."""
        moved = f"{self.noise_moved_s * 1e3:.1f} ms of noise moved off the request thread"
        if self.drift:
            return (
                f"encoder drift: the window is {self.window_saved_s * 1e3:.1f} ms shorter, but "
                f"only {moved}; the other {self.unexplained_s * 1e3:.1f} ms is run-to-run "
                "variation (mostly the encoders), not prenoise's saving"
            )
        if self.noisy:
            return (
                f"timing noise: the window is {-self.window_saved_s * 1e3:.1f} ms longer, far "
                f"more than drawing {self.noise_moved_s * 1e3:.1f} ms of noise on the worker "
                "can cost: other work on the machine, not prenoise; time more pairs"
            )
        if self.window_saved_s >= 0:
            change = f"{self.window_saved_s * 1e3:.1f} ms shorter"
        else:
            change = f"{-self.window_saved_s * 1e3:.1f} ms longer"
        return f"{moved}; the preparation window is {change}"


@dataclass(frozen=True)
class Timing:
    """A serial-vs-overlapped timing of one request, as a command shows it (seconds).

    `runs` says what was timed ("the verified runs, one per arm", "medians of 3 alternating
    pairs"); `noise_s` and `window_s` are `(serial, overlapped)`; what was saved is the
    attribution's (for pairs: the median of the per-pair differences, not the difference of
    the medians).
    """

    runs: str
    noise_s: tuple[float, float]
    window_s: tuple[float, float]
    attribution: WindowAttribution
