"""`prenoise bench` says what it measured (issue 34, item 7).

On the demo recipe it once reported the preparation window 0.58 s shorter with 1 ms of noise
moved: the encoders were faster in one arm, and nothing said so. Now every pair and the medians
carry the noise moved and the window difference, a window difference beyond the noise moved is
flagged as encoder drift, and the PNG and traces show the median pair, not the last one.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from prenoise.cli.commands import main
from prenoise.observe.metrics import RequestMetrics
from prenoise.observe.tracing import Span
from prenoise.ref2va import cli_options
from prenoise.ref2va.bench import BenchConfig, BenchResult, RequestRun, summarize
from prenoise.ref2va.config import load_recipe
from prenoise.ref2va.request_plan import plan_request

TINY = Path(__file__).with_name("tiny-recipe.yaml")
DRIFT_S = 1.0


@pytest.fixture()
def drifting_encoder(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The text encoder of the loaded models holds the request thread DRIFT_S longer on its
    first call (a cold cache, another process): the first timed request is the serial arm."""
    real_load = cli_options.load_models
    sleeps: list[float] = []

    def load_models(recipe: Any) -> Any:
        models = real_load(recipe)
        encode = models.text_encoder.encode_with_mask

        def drifting(*args: Any, **kwargs: Any) -> Any:
            delay = DRIFT_S if not sleeps else 0.0
            sleeps.append(delay)
            time.sleep(delay)
            return encode(*args, **kwargs)

        models.text_encoder.encode_with_mask = drifting
        return models

    monkeypatch.setattr(cli_options, "load_models", load_models)
    return sleeps


def test_a_drifting_encoder_is_flagged_not_credited(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    drifting_encoder: list[float],
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, "tiny.yaml")
    capsys.readouterr()
    argv = ["bench", "--recipe", "tiny.yaml", "--pairs", "1", "--warmup", "0", "--json", "b.json"]
    assert main(argv) == 0
    assert drifting_encoder == [DRIFT_S, 0.0]  # serial (drifted), then overlapped
    summary = json.loads(Path("b.json").read_text())
    median = summary["attribution"]["median"]
    assert summary["attribution"]["per_pair"] == [median]
    moved, saved = median["noise_moved_s"], median["window_saved_s"]
    assert moved == pytest.approx(-summary["delta"]["noise_critical_s"]["median"])
    assert saved == pytest.approx(-summary["delta"]["prep_window_s"]["median"])
    # the window gap is the delayed encoder's, not noise: most of it is what the noise moved
    # does not explain (the injected delay), whatever the machine's speed
    assert saved - max(moved, 0.0) > DRIFT_S / 2
    assert median["encoder_drift"] is True and median["timing_noise"] is False
    out = " ".join(capsys.readouterr().out.split())
    said = (
        f"1 pair: encoder drift: the window is {saved * 1e3:.1f} ms shorter, but only "
        f"{moved * 1e3:.1f} ms of noise moved off the request thread; the other "
        f"{(saved - max(moved, 0)) * 1e3:.1f} ms is run-to-run variation (mostly the encoders), "
        "not prenoise's saving"
    )
    assert said in out
    assert "pair 1: encoder drift" in out  # the flagged pair, named


def _run(arm: str, pair: int, window: float) -> RequestRun:
    metrics = RequestMetrics(window, 0.01 if arm == "serial" else 0.0, 0.0, 0.0, window, 0.0, 0)
    span = Span(f"{arm}-{pair}", "request", 1, "MainThread", 0.0, window)
    return RequestRun(arm, pair, metrics, [span])  # type: ignore[arg-type]


def test_the_timeline_shows_the_median_pair_not_the_last() -> None:

    # window differences per pair: -0.30, +0.02, -0.01 -> the median pair is the third (index 2)
    windows = [(1.30, 1.00), (1.00, 1.02), (1.00, 0.99)]
    runs = [
        run
        for pair, (serial, overlapped) in enumerate(windows)
        for run in (_run("serial", pair, serial), _run("overlapped", pair, overlapped))
    ]
    plan = plan_request(load_recipe(TINY), references=False)  # no reference file is written
    summary = summarize(runs, plan, BenchConfig(3, 0), {})
    result = BenchResult(runs, summary)
    assert result.median_pair == 2
    spans = result.pair_spans(2)
    assert [s.name for arm in ("serial", "overlapped") for s in spans[arm]] == [
        "serial-2",
        "overlapped-2",
    ]
    traces = result.chrome_traces()
    assert {e["name"] for t in traces.values() for e in t["traceEvents"] if e["ph"] == "X"} == {
        "serial-2",
        "overlapped-2",
    }
    flags = [(p["encoder_drift"], p["timing_noise"]) for p in summary["attribution"]["per_pair"]]
    assert flags == [(True, False), (False, False), (False, False)]
    assert summary["attribution"]["median"]["window_saved_s"] == pytest.approx(0.01)


def test_documented_commands_write_to_a_scratch_directory() -> None:
    """Running a documented bench command must not overwrite the committed results."""
    repo = TINY.parents[2]
    pages = [*repo.glob("*.md"), *repo.glob("docs/**/*.md"), *repo.glob("benchmarks/*.md")]
    blocks = [
        block
        for page in pages
        for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.S)
    ]
    assert any("--json outputs/bench/seed-15s.json" in block for block in blocks)
    writes = [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if re.search(r"--(json|trace-dir|out)\s+benchmarks/results", line)
    ]
    assert writes == []
