"""Round 3's LOW findings (issue 35): unclear API messages, a hang no check saw, and an audio cap
named as a frame cap."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from prenoise import Draw, PreparationExecutor, run_draw
from prenoise.preparation.executor import PreparationStateError
from prenoise.ref2va.limits import Limits
from prenoise.ref2va.media import MediaError, read_audio, synthetic_tone, write_wav
from waits import READY_CEILING_S, before, deadline

TAKES = "run_draw takes a Draw and a torch.Generator"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (Draw("v", (64,)), None),
            "run_draw takes a Draw and a torch.Generator, got Draw, NoneType",
        ),
        ((Draw("v", (64,)), 7), "run_draw takes a Draw and a torch.Generator, got Draw, int"),
        (
            ("v", torch.Generator()),
            "run_draw takes a Draw and a torch.Generator, got str, Generator",
        ),
    ],
)
def test_run_draw_names_a_wrong_argument(args: tuple[object, object], message: str) -> None:
    with pytest.raises(TypeError) as info:  # was AttributeError: 'NoneType' ... 'device'
        run_draw(*args)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_a_dtype_given_as_text_is_named() -> None:
    with pytest.raises(TypeError) as info:  # was "dtype float32 is not a floating dtype"
        Draw("v", (4,), dtype="float32")  # type: ignore[arg-type]
    assert str(info.value) == "draw 'v': dtype must be a torch.dtype, got 'float32'"


@pytest.mark.parametrize("workers", [True, 2.0, "2"])
def test_workers_must_be_an_int(workers: object) -> None:
    with pytest.raises(ValueError) as info:  # `True` was one worker
        PreparationExecutor(workers=workers)  # type: ignore[arg-type]
    assert str(info.value) == f"workers must be an int >= 1, got {workers!r}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_take_in_a_forked_child_is_refused_not_a_hang() -> None:
    release = threading.Event()
    with PreparationExecutor(name="forked") as prep:
        prep.submit("slow", lambda: release.wait(10))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: no worker thread exists here
            try:
                prep.take("slow")
                os.write(write, b"returned")
            except PreparationStateError as error:
                os.write(write, str(error).encode())
            finally:
                os._exit(0)
        os.close(write)
        status = _wait_or_kill(pid)  # before: the child's take blocked for ever
        said = os.read(read, 4096).decode()
        os.close(read)
        release.set()
        assert prep.take("slow") is True  # the parent's executor is unaffected
    assert os.waitstatus_to_exitcode(status) == 0
    assert said == (
        f"take('slow') in process {pid}, a child forked from {os.getpid()} where executor "
        "'forked' was opened: its worker threads do not exist here; open an executor in the child"
    )


def _wait_or_kill(pid: int) -> int:
    """The child's wait status, as soon as it exits; a child still running at the tests' wait
    ceiling is killed (a hang)."""
    at = deadline()
    while before(at):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"take() in the forked child {pid} hung for {READY_CEILING_S} s")


def test_the_audio_cap_is_named_in_seconds(tmp_path: Path) -> None:
    wav = write_wav(tmp_path / "tone.wav", synthetic_tone(3.0, 16000), 16000)
    with pytest.raises(MediaError) as info:
        read_audio(wav, 16000, limits=Limits(max_reference_frames=24))
    assert str(info.value) == (
        f"{wav}: more than 1 s of audio, above the audio cap of 1 s (24 frames at 24 fps: "
        "limits.max_reference_frames=24 (--max-reference-frames)); trim the reference, set its "
        "max_seconds, or raise the cap"
    )
