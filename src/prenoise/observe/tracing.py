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

__all__ = ["NULL_TRACER", "Category", "Span", "Tracer", "chrome_trace", "spans_from_chrome_trace"]


class Category:
    """Span categories the metrics understand."""

    REQUEST = "request"  # the preparation window: request start → denoise-ready inputs
    ENCODE = "encode"  # text encode, media decode, media encode
    NOISE = "noise"  # noise work on the request thread (serial draws; checks, transfers)
    WAIT = "wait"  # the request thread blocked on a prepared result
    PREPARE = "prepare"  # prepared work on a worker thread
    MIX = "mix"  # condition mixing
    INPUTS = "inputs"  # building denoise inputs
    DENOISE = "denoise"  # transformer calls / sampler steps
    DECODE = "decode"  # VAE decode and writing media


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


def chrome_trace(spans: list[Span], *, process_name: str = "prenoise") -> dict[str, Any]:
    """Spans as Chrome/Perfetto trace JSON (complete "X" events, µs, one lane per thread).

    Load the `json.dumps` of the result in ui.perfetto.dev or chrome://tracing.
    """
    origin = min((s.start_s for s in spans), default=0.0)
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": process_name}}
    ]
    for thread_id, thread_name in sorted({(s.thread_id, s.thread_name) for s in spans}):
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": 1,
                "tid": thread_id,
                "args": {"name": thread_name},
            }
        )
    for s in spans:
        events.append(
            {
                "name": s.name,
                "cat": s.category or "other",
                "ph": "X",
                "pid": 1,
                "tid": s.thread_id,
                "ts": (s.start_s - origin) * 1e6,
                "dur": max(s.duration_s, 0.0) * 1e6,
                "args": {k: _jsonable(v) for k, v in s.args.items()},
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def spans_from_chrome_trace(trace: dict[str, Any]) -> list[Span]:
    """Inverse of `chrome_trace` (times relative to the trace's first span, in seconds)."""
    events = trace["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    return [
        Span(
            e["name"],
            e.get("cat", ""),
            e["tid"],
            names.get(e["tid"], str(e["tid"])),
            e["ts"] / 1e6,
            (e["ts"] + e["dur"]) / 1e6,
            dict(e.get("args", {})),
        )
        for e in events
        if e.get("ph") == "X"
    ]
