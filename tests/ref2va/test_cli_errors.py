"""Ref2VA commands: bad values fail in one line with exit 2 before any model or media work, and
a termination signal during the MP4 write leaves nothing half-written."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cli_refusals import one_line
from prenoise.cli.commands import main
from prenoise.guards.seeds import SEED_MAX
from prenoise.ref2va import cli_options
from prenoise.ref2va.config import RecipeError, load_recipe
from waits import READY_CEILING_S

TINY = Path(__file__).with_name("tiny-recipe.yaml")


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory with the tiny recipe in which loading models is an error (too late)."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, tmp_path / "tiny.yaml")

    def no_models(*_args: object) -> None:
        raise AssertionError("models were loaded: the error came after heavy work started")

    monkeypatch.setattr(cli_options, "load_models", no_models)
    return tmp_path


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    out = one_line(capsys)
    assert out.startswith("error:"), out
    return out


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--seed", str(SEED_MAX), "--outputs", "2"], "seed + outputs - 1"),
        (["--seed", str(SEED_MAX + 1)], "seed range"),
        (["--seed", "-1"], "seed must be >= 0"),
        (["--device", "bogus"], "unknown device 'bogus'"),
        (["--device", "meta"], "not supported"),
        (["--device", "cuda"], "no cuda device is available"),
        (["--duration", "inf"], "duration: Input should be a finite number"),
        (["--duration", "nan"], "duration: Input should be a finite number"),
        (["--reference", "."], "is a directory"),
        (["--json", "."], "--json .: is a directory"),
    ],
)
def test_bad_request_values_fail_before_work(
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    extra: list[str],
    words: str,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["verify", "--recipe", "tiny.yaml", *extra]) == 2
    assert words in _one_line_error(capsys)


def test_checkpoint_that_is_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the real load_models: it opens the checkpoint's config first
    shutil.copy(TINY, tmp_path / "tiny.yaml")
    assert main(["verify", "--recipe", "tiny.yaml", "--checkpoint", "tiny.yaml"]) == 2
    assert "tiny.yaml: not a checkpoint directory (a file" in _one_line_error(capsys)


def test_seed_limit_is_inclusive(workdir: Path) -> None:
    recipe = load_recipe(workdir / "tiny.yaml", seed=SEED_MAX - 1, outputs=2)
    assert recipe.output_seed(1) == SEED_MAX


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("tau_audio: 0.5\n", "tau_audio must be 1.0"),
        ("duration: .inf\nframes: null\n", "finite number"),
        ("references: [{kind: image, path: a.png, max_seconds: .nan}]\n", "finite number"),
    ],
)
def test_recipe_values_the_pipeline_would_reject(workdir: Path, text: str, words: str) -> None:
    (workdir / "bad.yaml").write_text((workdir / "tiny.yaml").read_text() + text)
    with pytest.raises(RecipeError, match=words):
        load_recipe(workdir / "bad.yaml")


def test_binary_recipe_is_one_line_error(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "bin.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe binary")
    assert main(["generate", "--recipe", "bin.yaml"]) == 2
    assert "not a YAML text file" in _one_line_error(capsys)


@pytest.mark.parametrize("outputs", [1, 3])
def test_unwritable_outputs_fail_before_media_or_models(
    workdir: Path, capsys: pytest.CaptureFixture[str], outputs: int
) -> None:
    (workdir / "clip-2.mp4").mkdir()  # output 2's path is taken by a directory
    target = "clip.mp4" if outputs == 3 else "clip-2.mp4"
    code = main(["generate", "--recipe", "tiny.yaml", "--out", target, "--outputs", str(outputs)])
    assert code == 2
    assert "clip-2.mp4: is a directory" in _one_line_error(capsys)
    assert not (workdir / "tiny-reference.mp4").exists()  # not even the reference was made


def test_recipe_output_dir_that_is_a_file(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "taken").write_text("")
    text = (workdir / "tiny.yaml").read_text() + "output_dir: taken\n"
    (workdir / "od.yaml").write_text(text)
    assert main(["generate", "--recipe", "od.yaml"]) == 2
    assert "output_dir" in _one_line_error(capsys)


def test_bench_output_paths_fail_before_work(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "file").write_text("")
    assert main(["bench", "--recipe", "tiny.yaml", "--trace-dir", "file"]) == 2
    assert "--trace-dir" in _one_line_error(capsys)
    assert main(["bench", "--recipe", "tiny.yaml", "--json", "file/x.json"]) == 2
    assert "is a file, not a directory" in _one_line_error(capsys)


def test_torchrun_commands_check_outputs_before_joining_the_group(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from prenoise.distributed import commands

    def no_group(*_args: object) -> None:
        raise AssertionError("the process group was initialised before the output check")

    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setattr(commands, "init_distributed", no_group)
    assert main(["verify", "--recipe", "tiny.yaml", "--json", "."]) == 2
    assert "--json .: is a directory" in _one_line_error(capsys)


def test_serve_uses_the_same_seed_rule(workdir: Path) -> None:
    pytest.importorskip("fastapi")
    from prenoise.serve.schema import RequestRejected, ServeLimits, build_plan, parse_request

    base = load_recipe(workdir / "tiny.yaml")
    limits = ServeLimits()
    ok = parse_request({"seed": SEED_MAX})
    assert build_plan(base, ok, media_root=None, uploads=[], limits=limits).recipe.seed == SEED_MAX
    with pytest.raises(RequestRejected, match="seed"):
        parse_request({"seed": SEED_MAX + 1})
    two = parse_request({"seed": SEED_MAX, "outputs": 2})
    with pytest.raises(RequestRejected, match="seed \\+ outputs - 1"):
        build_plan(base, two, media_root=None, uploads=[], limits=limits)


# -- SIGTERM / SIGHUP during the MP4 write: the partial file is removed ------------------------

# Runs `prenoise generate` with the output's MP4 writer paused after its first chunk: by then
# `.clip.mp4.PID.partial.mp4` exists; the script names it in READY and waits for the signal.
_PAUSED_GENERATE = """
import sys, time
from pathlib import Path

import prenoise.ref2va.media.writing as media
from prenoise.cli.commands import main

ready = Path(sys.argv[1])
real_write = media._write_mp4

def paused_write(path, chunks, *rest):
    if not path.name.startswith(".clip.mp4."):  # the synthetic reference is written as usual
        return real_write(path, chunks, *rest)

    def paused_chunks():
        yield next(chunks)
        ready.write_text(str(path))
        while True:
            time.sleep(0.01)
    return real_write(path, paused_chunks(), *rest)

media._write_mp4 = paused_write
sys.exit(main(sys.argv[2:]))
"""


def test_sigterm_during_mp4_write_removes_the_partial_file(tmp_path: Path) -> None:
    # SIGHUP takes the same handler (tests/test_interrupts.py); one real process is enough.
    signum = signal.SIGTERM
    shutil.copy(TINY, tmp_path / "tiny.yaml")
    (tmp_path / "paused.py").write_text(_PAUSED_GENERATE)
    ready = tmp_path / "ready"
    argv = ["generate", "--recipe", "tiny.yaml", "--out", "clip.mp4", "--arm", "serial"]
    proc = subprocess.Popen(
        [sys.executable, "paused.py", str(ready), *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        while not ready.exists() and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[0]
        partial = Path(ready.read_text())
        assert partial.name.startswith(".clip.mp4.") and partial.name.endswith(".partial.mp4")
        assert (tmp_path / partial.name).exists()
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=READY_CEILING_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, out
    assert f"terminated by {signal.Signals(signum).name}" in out and "Traceback" not in out
    assert not (tmp_path / partial.name).exists()
    assert not (tmp_path / "clip.mp4").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial.mp4")]


def test_a_size_the_scaler_refuses_is_blamed_on_the_size_not_the_file(tmp_path: Path) -> None:
    from prenoise.ref2va.media import MediaError, read_image, write_image

    image = write_image(tmp_path / "ref.png", torch.zeros(96, 128, 3, dtype=torch.uint8))
    with pytest.raises(MediaError, match="requested 20000x20000 output") as info:
        read_image(image, 20000, 20000)
    assert "ref.png" not in str(info.value)  # the file is fine


def test_serve_output_dir_that_is_a_file_fails_before_models(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    serve = pytest.importorskip("prenoise.serve")

    def no_app(*_args: object) -> None:
        raise AssertionError("the service was built before the output check")

    monkeypatch.setattr(serve, "create_app", no_app)
    (workdir / "taken").write_text("")
    assert main(["serve", "--recipe", "tiny.yaml", "--output-dir", "taken"]) == 2
    assert "--output-dir taken: exists and is not a directory" in _one_line_error(capsys)


def test_verify_prints_where_its_report_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, tmp_path / "tiny.yaml")
    assert main(["verify", "--recipe", "tiny.yaml", "--json", "reports/v.json"]) == 0
    assert "wrote the per-field report to reports/v.json" in capsys.readouterr().out
    assert (tmp_path / "reports" / "v.json").is_file()
