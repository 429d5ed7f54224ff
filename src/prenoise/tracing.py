"""Thread-aware spans for request timelines.

A `Tracer` records `Span`s from any thread (perf_counter clock). The executor and the pipeline
record into it; benchmarks derive metrics and write Chrome/Perfetto trace JSON from the spans.
`NULL_TRACER` records nothing and costs one attribute lookup per span.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NULL_TRACER", "Span", "Tracer"]


@dataclass(frozen=True)
class Span:
    """A named interval on one thread, in seconds of `time.perf_counter()`."""

    name: str
    category: str
    thread_id: int
    thread_name: str
    start_s: float
    end_s: float
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        """`end_s - start_s`."""
        return self.end_s - self.start_s


class Tracer:
    """Collects spans from every thread; thread-safe, append-only."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._spans: list[Span] = []
        self._lock = threading.Lock()

    @contextmanager
    def span(self, name: str, category: str = "", **args: Any) -> Iterator[None]:
        """Record the time spent inside the `with` block on the calling thread."""
        if not self.enabled:
            yield
            return
        thread = threading.current_thread()
        start = time.perf_counter()
        try:
            yield
        finally:
            end = time.perf_counter()
            self.add(Span(name, category, thread.ident or 0, thread.name, start, end, dict(args)))

    def add(self, span: Span) -> None:
        """Append an already measured span."""
        if self.enabled:
            with self._lock:
                self._spans.append(span)

    @property
    def spans(self) -> list[Span]:
        """A snapshot of the spans recorded so far, in recording order."""
        with self._lock:
            return list(self._spans)

    def clear(self) -> None:
        """Forget every recorded span."""
        with self._lock:
            self._spans.clear()


NULL_TRACER = Tracer(enabled=False)
