"""Long commands say where they are (issue 34, item 6).

`generate` on the seed recipe ran 7.4 minutes in silence, `bench` 6.8. Now: a live rich line on a
terminal; one stderr line per stage elsewhere (a log, CI, `make demo | tee`); nothing with
`--quiet`. Results stay on stdout, unchanged.
"""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from prenoise.cli.commands import main
from prenoise.observe.progress import PLAIN_PREFIX, CommandProgress

TINY = Path(__file__).parent / "ref2va" / "tiny-recipe.yaml"


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, "tiny.yaml")
    return tmp_path


def _stages(err: str, command: str) -> list[str]:
    lines = err.splitlines()
    pattern = re.compile(rf"^\[prenoise {command} \d+\.\ds\] (.+)$")
    matched = [pattern.match(line) for line in lines]
    assert all(matched), lines  # nothing else on stderr
    return [m.group(1) for m in matched if m]


def test_generate_prints_one_line_per_stage_when_not_on_a_terminal(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["generate", "--recipe", "tiny.yaml", "--out", "clip.mp4"]) == 0
    captured = capsys.readouterr()
    assert _stages(captured.err, "generate") == [
        "load models",
        "prepare",
        "denoise output 0 (2 steps)",
        "decode output 0",
    ]
    assert "wrote clip.mp4" in captured.out and PLAIN_PREFIX not in captured.out


def test_verify_and_bench_stages(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["verify", "--recipe", "tiny.yaml", "--pairs", "1"]) == 0
    assert _stages(capsys.readouterr().err, "verify") == [
        "load models",
        "prepare: serial arm",
        "prepare: overlapped arm",
        "compare",
        "pair 1/1 (serial)",
        "pair 1/1 (overlapped)",
    ]
    assert main(["bench", "--recipe", "tiny.yaml", "--pairs", "1", "--warmup", "1"]) == 0
    assert _stages(capsys.readouterr().err, "bench") == [
        "load models",
        "warm-up 1/1 (serial)",
        "pair 1/1 (serial)",
        "pair 1/1 (overlapped)",
    ]


def test_quiet_prints_no_progress_and_the_same_results(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["generate", "--recipe", "tiny.yaml", "--out", "a.mp4", "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""
    assert main(["generate", "--recipe", "tiny.yaml", "--out", "b.mp4"]) == 0
    loud = capsys.readouterr()
    assert loud.err.count(PLAIN_PREFIX) == 4
    assert quiet.out.splitlines()[-1] == "wrote a.mp4"
    assert loud.out.splitlines()[-1] == "wrote b.mp4"
    assert Path("a.mp4").read_bytes() == Path("b.mp4").read_bytes()


def test_on_a_terminal_a_live_line_counts_the_steps_and_prints_no_plain_lines() -> None:
    out = io.StringIO()
    err = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with CommandProgress(console, "generate", stream=err) as progress:
        progress.stage("denoise output 0", 8)
        progress.advance(5)
        assert progress._progress is not None and progress._task is not None
        task = progress._progress.tasks[0]
        assert (task.description, task.total, task.completed) == ("denoise output 0", 8, 5)
    assert err.getvalue() == ""
    assert PLAIN_PREFIX not in out.getvalue()


def test_quiet_on_a_terminal_shows_nothing() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with CommandProgress(console, "bench", quiet=True) as progress:
        progress.stage("pair 1/5 (serial)")
    assert out.getvalue() == ""


def test_doctor_says_each_part_it_checks(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 41: doctor ran 34-36 s in a vLLM-Omni environment in silence (diffusers' source
    digests are most of it). Now a line per part on stderr; the table alone on stdout."""
    assert main(["doctor"]) == 0
    captured = capsys.readouterr()
    assert _stages(captured.err, "doctor") == [
        "torch and the noise backend's self-checks",
        "the noise streams' self-checks",
        "diffusers: the source digests of the code each plan relies on",
        "vLLM-Omni: the source digests of the code each path relies on",
        "SGLang: the source digests of the code each path relies on",
    ]
    assert PLAIN_PREFIX not in captured.out and "noise backend" in captured.out
    assert "SGLang plugin" in captured.out


def test_stream_digest_shows_tenths_of_a_large_count(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A count up to 2**33 draws for minutes: one line per tenth (the threshold lowered here so
    that the test draws little); the digest on stdout is the one without progress."""
    from prenoise.cli import commands

    argv = ["stream-digest", "--stream", "native", "--seed", "3", "--count", "4096,4096"]
    assert main(argv) == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""  # under the threshold: nothing
    monkeypatch.setattr(commands, "STREAM_DIGEST_PROGRESS_VALUES", 16)
    monkeypatch.setattr("prenoise.noise.streams.CANCEL_CHUNK_ELEMS", 512)  # 16 chunks
    assert main(argv) == 0
    shown = capsys.readouterr()
    assert shown.out == quiet.out
    stages = _stages(shown.err, "stream-digest")
    assert stages == [f"drawing 8192 values in stream native: {p}%" for p in range(0, 100, 10)]
