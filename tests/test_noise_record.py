"""The noise recorder (`prenoise.observe.noise_record`): off unless the variable names a
directory; on, one whole JSON line per call whose digest is the values' bytes; threads never tear
a line; an I/O error is one WARNING and the end of recording, never an exception."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from prenoise.observe import noise_record
from prenoise.observe.noise_record import RECORD_ENV, noise_digest, record_noise, recording
from prenoise.verify.bits import tensor_sha256


@pytest.fixture(autouse=True)
def fresh_recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(RECORD_ENV, raising=False)
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    noise_record._reset()
    yield
    noise_record._reset()


def _lines(directory: Path) -> list[dict[str, object]]:
    files = sorted(directory.glob("noise-*.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


def _record(noise: torch.Tensor, **fields: object) -> None:
    args: dict[str, object] = {
        "engine": "test",
        "site": "step",
        "request": "r0",
        "seed": 7,
        "step": 0,
    }
    args.update(fields)
    record_noise(noise=noise, **args)  # type: ignore[arg-type]


def test_off_by_default_and_when_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not recording()
    _record(torch.zeros(3))
    monkeypatch.setenv(RECORD_ENV, "  ")
    assert not recording()
    _record(torch.zeros(3))
    assert list(tmp_path.iterdir()) == []


def test_one_line_per_call_with_every_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RECORD_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert recording()
    noise = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    _record(noise, group="dp0")
    _record(noise, step=1, rank=5, seed=None)
    (file,) = tmp_path.glob("noise-*.jsonl")
    assert file.name == f"noise-{os.uname().nodename}-{os.getpid()}.jsonl"
    first, second = _lines(tmp_path)
    expected = hashlib.sha256(noise.numpy().tobytes()).hexdigest()
    assert first["digest"] == second["digest"] == expected
    assert first["engine"] == "test" and first["site"] == "step" and first["request"] == "r0"
    assert (first["seed"], first["step"], first["rank"], first["world_size"]) == (7, 0, 3, 4)
    assert first["group"] == "dp0" and first["shape"] == [2, 3] and first["dtype"] == "float32"
    assert first["pid"] == os.getpid() and isinstance(first["time"], float)
    assert (second["seed"], second["step"], second["rank"], second["group"]) == (None, 1, 5, None)


def test_the_digest_is_the_values_whatever_the_layout() -> None:
    base = torch.randn(4, 6, generator=torch.Generator().manual_seed(2))
    assert noise_digest(base.t().contiguous().t()) == noise_digest(base)  # strides differ
    assert noise_digest(base[:, ::2]) == noise_digest(base[:, ::2].contiguous())
    assert noise_digest(base.bfloat16()) != noise_digest(base)  # bytes of another dtype
    neg_zero = torch.tensor([-0.0]), torch.tensor([0.0])
    assert noise_digest(neg_zero[0]) != noise_digest(neg_zero[1])  # bits, not values
    nan = torch.tensor([float("nan")])
    assert noise_digest(nan) == noise_digest(nan.clone())
    c = torch.randn(3, dtype=torch.complex64, generator=torch.Generator().manual_seed(3))
    assert noise_digest(c.conj()) == noise_digest(c.conj().resolve_conj())
    assert noise_digest(base) == tensor_sha256(base)  # the digest `compare` reports
    assert noise_digest(torch.empty(0)) == hashlib.sha256(b"").hexdigest()


def test_recording_never_changes_the_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RECORD_ENV, str(tmp_path))
    noise = torch.randn(5, 7)[:, ::2]
    before = noise.clone()
    _record(noise)
    assert torch.equal(noise, before) and noise.stride() == (7, 2)


def test_threads_write_whole_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RECORD_ENV, str(tmp_path))
    noise = torch.randn(64)

    def work(i: int) -> None:
        for step in range(50):
            _record(noise, request=f"r{i}", step=step)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = _lines(tmp_path)  # every line parses: none torn or interleaved
    assert len(lines) == 400
    assert {(line["request"], line["step"]) for line in lines} == {
        (f"r{i}", s) for i in range(8) for s in range(50)
    }


def test_an_io_error_is_one_warning_then_silence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(RECORD_ENV, str(tmp_path / "missing"))
    with caplog.at_level(logging.WARNING, logger="prenoise.observe.noise_record"):
        _record(torch.zeros(2))
        _record(torch.zeros(2))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "records no more noise" in warnings[0].getMessage()
    assert not recording()
    (tmp_path / "missing").mkdir()
    _record(torch.zeros(2))  # stopped for this process, even once the directory exists
    assert _lines(tmp_path / "missing") == []


def test_a_failing_write_does_not_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(RECORD_ENV, str(tmp_path))
    _record(torch.zeros(2))

    def full(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(noise_record.os, "write", full)
    with caplog.at_level(logging.WARNING, logger="prenoise.observe.noise_record"):
        _record(torch.zeros(2))
    assert "no space left on device" in caplog.text.lower()
    assert not recording()


def test_an_unreadable_tensor_does_not_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(RECORD_ENV, str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="prenoise.observe.noise_record"):
        _record(torch.empty(3, device="meta"))
    assert "reading a tensor failed" in caplog.text
    assert _lines(tmp_path) == []


def test_a_forked_child_writes_its_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RECORD_ENV, str(tmp_path))
    _record(torch.zeros(1))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _record(torch.ones(1), request="child")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    names = {f.name for f in tmp_path.glob("noise-*.jsonl")}
    assert names == {f"noise-{os.uname().nodename}-{p}.jsonl" for p in (os.getpid(), pid)}
