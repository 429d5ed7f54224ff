"""`prenoise bench`: a 1-pair run of the tiny recipe (no timing assertions), JSON and traces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from prenoise.cli.commands import main
from prenoise.observe.tracing import Category

TINY = Path(__file__).with_name("tiny-recipe.yaml")
METRICS = ("prep_window_s", "noise_critical_s", "noise_worker_s", "overlap_s", "peak_rss_bytes")


def test_one_pair_bench_writes_schema_traces_and_timeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, "tiny.yaml")
    args = ["bench", "--recipe", "tiny.yaml", "--pairs", "1", "--warmup", "0"]
    assert main([*args, "--json", "b.json", "--trace-dir", "traces", "--encoder-threads", "1"]) == 0
    summary = json.loads(Path("b.json").read_text())
    assert summary["pairs"] == 1
    for arm in ("serial", "overlapped"):
        for metric in METRICS:
            stats = summary[arm][metric]
            assert set(stats) == {"median", "min", "max", "runs"} and len(stats["runs"]) == 1
    for metric in METRICS:
        assert len(summary["delta"][metric]["per_pair"]) == 1
    assert summary["threads"]["encoder_threads_flag"] == 1
    assert summary["machine"]["torch"]
    # the serial arm draws on the request thread; the overlapped arm on the worker
    assert summary["serial"]["noise_worker_s"]["median"] == 0
    assert summary["overlapped"]["noise_worker_s"]["median"] > 0
    for arm in ("serial", "overlapped"):
        trace = json.loads(Path(f"traces/ref2va-tiny-{arm}.trace.json").read_text())
        events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert any(e["cat"] == Category.REQUEST for e in events)
        assert all({"name", "ts", "dur", "pid", "tid"} <= set(e) for e in events)
    png = Path("traces/ref2va-tiny-timeline.png").read_bytes()
    assert png.startswith(b"\x89PNG")
