from __future__ import annotations

import json

import pytest

from prenoise.observe.metrics import derive_metrics, intersection_length, interval_union
from prenoise.observe.tracing import Category, Span, Tracer, chrome_trace

REQ, WORKER = 1, 2


def span(name: str, cat: str, tid: int, start: float, end: float) -> Span:
    return Span(name, cat, tid, "main" if tid == REQ else "prep-0", start, end)


SERIAL = [
    span("prepare", Category.REQUEST, REQ, 0.0, 10.0),
    span("text_encode", Category.ENCODE, REQ, 0.0, 3.0),
    span("media_encode", Category.ENCODE, REQ, 3.0, 7.0),
    span("draw video", Category.NOISE, REQ, 7.0, 9.0),
    span("mix", Category.MIX, REQ, 9.0, 9.5),
]
OVERLAPPED = [
    span("prepare", Category.REQUEST, REQ, 0.0, 7.75),
    span("text_encode", Category.ENCODE, REQ, 0.0, 3.0),
    span("media_encode", Category.ENCODE, REQ, 3.0, 7.0),
    span("video", Category.PREPARE, WORKER, 0.5, 2.5),
    span("cond", Category.PREPARE, WORKER, 6.5, 7.2),
    span("wait:cond", Category.WAIT, REQ, 7.0, 7.2),
    span("check", Category.NOISE, REQ, 7.1, 7.25),  # nested in the wait: counted once
    span("mix", Category.MIX, REQ, 7.25, 7.75),
]


def test_interval_helpers() -> None:
    assert interval_union([(3, 4), (0, 1), (0.5, 2), (2, 2.5)]) == [(0, 2.5), (3, 4)]
    assert intersection_length([(0, 10)], [(1, 2), (3, 5)]) == 3
    assert intersection_length([(0, 1)], [(2, 3)]) == 0


def test_serial_metrics() -> None:
    m = derive_metrics(SERIAL, REQ, peak_rss_bytes=123)
    assert (m.prep_window_s, m.noise_critical_s, m.noise_worker_s, m.overlap_s) == (10, 2, 0, 0)
    assert (m.encode_s, m.mix_s, m.peak_rss_bytes) == (7, 0.5, 123)


def test_overlapped_metrics() -> None:
    m = derive_metrics(OVERLAPPED, REQ)
    assert m.prep_window_s == 7.75
    assert m.noise_critical_s == pytest.approx(0.25)
    assert m.noise_worker_s == pytest.approx(2.7)
    assert m.overlap_s == pytest.approx(2.5)  # 0.5–2.5 and 6.5–7.0 under the encoders


def test_chrome_trace_is_valid_json_with_thread_lanes() -> None:
    trace = json.loads(json.dumps(chrome_trace(OVERLAPPED)))
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(OVERLAPPED)
    assert {e["tid"] for e in complete} == {REQ, WORKER}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {"main", "prep-0"}


def test_tracer_records_from_threads() -> None:
    tracer = Tracer()
    with tracer.span("a", Category.ENCODE, size=3):
        pass
    (s,) = tracer.spans
    assert s.name == "a" and s.args == {"size": 3} and s.end_s >= s.start_s


def test_timeline_png(tmp_path: object) -> None:
    from pathlib import Path

    from prenoise.observe.timeline_plot import plot_timelines

    out = plot_timelines(
        {"serial": SERIAL, "overlapped": OVERLAPPED}, Path(str(tmp_path)) / "t.png"
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_peak_rss_reset_and_read() -> None:
    import mmap

    from prenoise.observe.metrics import peak_rss_bytes, reset_peak_rss

    reset_peak_rss()
    base = peak_rss_bytes()
    size = 64 * 1024 * 1024
    block = mmap.mmap(-1, size)  # fresh anonymous pages: resident only once written
    block.write(b"\x01" * size)
    grown = peak_rss_bytes()
    block.close()
    assert grown >= base + 48 * 1024 * 1024
    if reset_peak_rss():
        assert peak_rss_bytes() < grown


def test_chrome_trace_round_trip() -> None:
    from prenoise.observe.tracing import spans_from_chrome_trace

    back = spans_from_chrome_trace(json.loads(json.dumps(chrome_trace(OVERLAPPED))))
    assert [(s.name, s.category, s.thread_name) for s in back] == [
        (s.name, s.category, s.thread_name) for s in OVERLAPPED
    ]
    assert [round(s.duration_s, 9) for s in back] == [round(s.duration_s, 9) for s in OVERLAPPED]
