"""Cancel points: long preparation work (media decode, chunked draws) polls an event and stops.

Work that may run for long takes a `cancel` argument: anything with `is_set()` (a
`threading.Event`, or `any_of(...)` of several). Between two bounded pieces of work (a decoded
frame, a filled chunk) it calls `raise_if_cancelled(cancel, what)`, which raises `Cancelled`
once the event is set. Nothing is half-returned: the caller sees the exception, never a partial
result.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["CancelEvent", "Cancelled", "any_of", "raise_if_cancelled"]


class CancelEvent(Protocol):
    """Anything with `is_set()`, e.g. `threading.Event`."""

    def is_set(self) -> bool:
        """True once the work should stop."""
        ...


class Cancelled(RuntimeError):
    """Work stopped at a cancel point because its cancel event was set."""


class _AnyOf:
    """Set as soon as any of its events is set."""

    def __init__(self, events: tuple[CancelEvent, ...]) -> None:
        self._events = events

    def is_set(self) -> bool:
        return any(event.is_set() for event in self._events)


def any_of(*events: CancelEvent | None) -> CancelEvent | None:
    """One event that is set when any of `events` is (None entries are skipped; None if empty)."""
    present = tuple(e for e in events if e is not None)
    if not present:
        return None
    return present[0] if len(present) == 1 else _AnyOf(present)


def raise_if_cancelled(cancel: CancelEvent | None, what: str) -> None:
    """Raise `Cancelled` naming `what` when `cancel` is set (a no-op for None)."""
    if cancel is not None and cancel.is_set():
        raise Cancelled(f"{what}: cancelled")
