"""Per-request metrics derived from a span timeline (see `prenoise.observe.tracing.Category`).

- `prep_window_s`: duration of the request-thread REQUEST span (start → denoise-ready inputs);
- `noise_critical_s`: request-thread time in NOISE and WAIT spans (drawing in the serial arm;
  waiting for, checking and moving prepared noise in the overlapped arm), overlaps merged;
- `noise_worker_s`: worker-thread time in PREPARE spans, overlaps merged;
- `overlap_s`: worker PREPARE time that ran while the request thread was in ENCODE spans;
- `encode_s`, `mix_s`: request-thread ENCODE and MIX time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prenoise.observe.tracing import Category, Span

__all__ = [
    "RequestMetrics",
    "derive_metrics",
    "intersection_length",
    "interval_union",
    "peak_rss_bytes",
    "reset_peak_rss",
]

Interval = tuple[float, float]


def interval_union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering exactly the union of the inputs."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[Interval]) -> float:
    return sum(end - start for start, end in intervals)


def intersection_length(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """Total length of the intersection of two interval sets."""
    ua, ub = interval_union(a), interval_union(b)
    total, i, j = 0.0, 0, 0
    while i < len(ua) and j < len(ub):
        lo, hi = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        total += max(0.0, hi - lo)
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class RequestMetrics:
    """Derived timings (seconds) and memory of one request."""

    prep_window_s: float
    noise_critical_s: float
    noise_worker_s: float
    overlap_s: float
    encode_s: float
    mix_s: float
    peak_rss_bytes: int


def derive_metrics(
    spans: Iterable[Span], request_thread_id: int, *, peak_rss_bytes: int = 0
) -> RequestMetrics:
    """Compute `RequestMetrics` from the spans of one request (see the module docstring)."""
    spans = list(spans)

    def on_request(*categories: str) -> list[Interval]:
        return [
            (s.start_s, s.end_s)
            for s in spans
            if s.thread_id == request_thread_id and s.category in categories
        ]

    worker = [
        (s.start_s, s.end_s)
        for s in spans
        if s.thread_id != request_thread_id and s.category == Category.PREPARE
    ]
    window = on_request(Category.REQUEST)
    encode = on_request(Category.ENCODE)
    return RequestMetrics(
        prep_window_s=_length(interval_union(window)),
        noise_critical_s=_length(interval_union(on_request(Category.NOISE, Category.WAIT))),
        noise_worker_s=_length(interval_union(worker)),
        overlap_s=intersection_length(worker, encode),
        encode_s=_length(interval_union(encode)),
        mix_s=_length(interval_union(on_request(Category.MIX))),
        peak_rss_bytes=peak_rss_bytes,
    )


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark for this process (Linux `clear_refs`); True if it worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """Peak resident set size since the last `reset_peak_rss` (or process start), in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
