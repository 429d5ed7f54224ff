"""A torch release whose CPU normal path is not the one prenoise reproduces is refused, never
silently different: a fake release (torch's `randn` and `Tensor.normal_` patched, as a changed
kernel would behave) against the kernel's self-check, the named streams' golden self-check and
the half-precision rule check, with the process's choices forgotten before and after.

- float32 changed: the kernel is refused ("self-check against torch failed (...): values
  differ ...; using torch"), prenoise's native draws are then the (fake) torch's own bits; the
  named streams, which leave draws under 16 values to torch's scalar path, fail their goldens
  and raise `NoiseStreamError` naming the case.
- the bfloat16/float16 rule changed (torch < 2.13 drew them otherwise): `half_rule_status`
  names the torch release and the case; the kernel keeps float32 and leaves half draws to
  torch, and a `HalfDrawRule.NATIVE` draw is torch's own (also chunked with a cancel event).
- the real torch here: every check passes (`make test` runs this on torch 2.13.0 and 2.14.1).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomllib
import torch
from packaging.requirements import Requirement
from packaging.version import Version

from prenoise.noise import kernel
from prenoise.noise import streams as noise_streams
from prenoise.preparation.draws import Draw, HalfDrawRule, run_draw

REPO = Path(__file__).resolve().parents[1]
FAKE = "2.99.0+fake"
HALF = (torch.bfloat16, torch.float16)


def _forget() -> None:
    kernel._reset_backend()
    noise_streams._reset()


@pytest.fixture
def fresh() -> Iterator[None]:
    _forget()
    yield
    _forget()


def _flip_first(out: torch.Tensor) -> None:
    flat = out.view(-1)
    if flat.numel():
        view = flat.view(torch.int32 if out.dtype == torch.float32 else torch.int16)
        view[0] ^= 1


def fake_release(monkeypatch: pytest.MonkeyPatch, changes: Callable[[torch.Tensor], bool]) -> None:
    """Make torch's `randn` and `Tensor.normal_` draw what they draw, then flip the lowest bit of
    the first value of every CPU result `changes` selects; `torch.__version__` says FAKE."""
    real_randn, real_normal = torch.randn, torch.Tensor.normal_

    def randn(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = real_randn(*args, **kwargs)
        if out.device.type == "cpu" and changes(out):
            _flip_first(out)
        return out

    def normal_(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        real_normal(self, *args, **kwargs)
        if self.device.type == "cpu" and changes(self):
            _flip_first(self)
        return self

    monkeypatch.setattr(torch, "randn", randn)
    monkeypatch.setattr(torch.Tensor, "normal_", normal_)
    monkeypatch.setattr(torch, "__version__", FAKE)


def test_the_torch_under_test_is_the_release_make_asked_for() -> None:
    """`make pytest` runs on torch 2.13.0, `make pytest-torch-2.14` on 2.14.1: each sets it."""
    expected = os.environ.get("PRENOISE_EXPECT_TORCH")
    if expected is None:
        pytest.skip("PRENOISE_EXPECT_TORCH is unset (the make targets set it)")
    assert torch.__version__.split("+")[0] == expected


def test_the_lowest_torch_admitted_is_the_tested_one() -> None:
    """pyproject's torch floor is the Makefile's pinned (tested) release; releases below it draw
    bfloat16/float16 otherwise (kernel.half_rule_status)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (torch_req,) = [Requirement(r) for r in project["dependencies"] if r.startswith("torch")]
    (floor,) = [Version(s.version) for s in torch_req.specifier if s.operator == ">="]
    assert [s.operator for s in torch_req.specifier] == [">="]  # no cap: newer ones self-check
    makefile = (REPO / "Makefile").read_text()
    pinned = re.search(r"^TORCH_PIN := torch==(\S+)$", makefile, re.M)
    assert pinned is not None and floor == Version(pinned.group(1))
    following = re.search(r"^TORCH_NEXT_PIN := torch==(\S+)$", makefile, re.M)
    assert following is not None  # what `prenoise doctor` says was tested
    assert (pinned.group(1), following.group(1)) == kernel.TESTED_TORCH_RELEASES


def test_the_installed_torch_passes_every_check(fresh: None) -> None:
    status = kernel.backend_status()
    assert status.active or kernel.extension() is None, status
    half = kernel.half_rule_status()
    assert half.holds and half.reason.startswith(f"torch {torch.__version__} draws bfloat16")
    for stream in noise_streams.NON_NATIVE_STREAMS:
        if kernel.extension() is not None:
            assert noise_streams.stream_status(stream).usable, stream


def test_a_release_with_another_float32_path_is_refused(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if kernel.extension() is None:
        pytest.skip("no C kernel built: torch serves every draw already")
    fake_release(monkeypatch, lambda t: t.dtype == torch.float32)
    with caplog.at_level(logging.WARNING, logger="prenoise.noise.kernel"):
        status = kernel.backend_status()
    assert (status.name, status.active) == ("torch", False)
    assert status.reason.startswith("self-check against torch failed (")
    assert "values differ for seed=0 n=16 threads=1" in status.reason
    assert status.reason.endswith("; using torch")
    assert [r.getMessage() for r in caplog.records] == [
        f"prenoise noise kernel disabled: {status.reason}"
    ]
    for shape in ((16,), (4, 1000)):  # prenoise's native draws are the fake torch's own
        mine, theirs = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        got = kernel.randn(shape, generator=mine)
        expected = torch.randn(shape, generator=theirs)
        assert torch.equal(got.view(torch.int32), expected.view(torch.int32))
        assert torch.equal(mine.get_state(), theirs.get_state())
    for stream in noise_streams.NON_NATIVE_STREAMS:  # their draws under 16 values are torch's
        with pytest.raises(noise_streams.NoiseStreamError) as refused:
            noise_streams.randn(32, generator=torch.Generator().manual_seed(0), stream=stream)
        message = str(refused.value)
        assert message.startswith(f"noise stream {stream!r} (float32/bfloat16/float16) is refused")
        assert "values differ from the golden digest for seed=" in message
    assert noise_streams.local_torch_stream() == "unknown"


def test_a_release_with_another_half_rule_is_refused(
    fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake_release(monkeypatch, lambda t: t.dtype in HALF)
    with caplog.at_level(logging.WARNING, logger="prenoise.noise.kernel"):
        half = kernel.half_rule_status()
    assert not half.holds
    assert half.reason == (
        f"torch {FAKE} draws bfloat16 randn(16) (seed 0) unlike its float32 draw rounded "
        "(values differ): bfloat16/float16 draws are left to torch (the rule prenoise "
        "reproduces is torch >= 2.13's)"
    )
    assert [r.getMessage() for r in caplog.records] == [f"prenoise noise kernel: {half.reason}"]
    assert kernel.backend_status().active or kernel.extension() is None  # float32 unaffected
    for dtype in HALF:
        for n in (1024, 4096):
            mine, theirs = torch.Generator().manual_seed(n), torch.Generator().manual_seed(n)
            got = kernel.randn((n,), generator=mine, dtype=dtype)
            expected = torch.randn((n,), generator=theirs, dtype=dtype)
            assert torch.equal(got.view(torch.int16), expected.view(torch.int16)), dtype
            draw = Draw("noise", (4, n // 4), dtype, half_rule=HalfDrawRule.NATIVE)
            assert draw.native_half
            for cancel in (None, threading.Event()):
                mine, theirs = torch.Generator().manual_seed(n), torch.Generator().manual_seed(n)
                got = run_draw(draw, mine, cancel=cancel, chunk_elems=64)
                expected = torch.randn((4, n // 4), generator=theirs, dtype=dtype)
                assert torch.equal(got.view(torch.int16), expected.view(torch.int16)), dtype
                assert torch.equal(mine.get_state(), theirs.get_state())


def test_float32_then_cast_draws_do_not_depend_on_the_half_rule(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_release(monkeypatch, lambda t: t.dtype in HALF)
    draw = Draw("noise", (8, 128), torch.bfloat16)  # FLOAT32_THEN_CAST: the serial code's rule
    assert not draw.native_half
    mine, theirs = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    got = run_draw(draw, mine)
    expected = torch.randn((8, 128), generator=theirs).to(torch.bfloat16)
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
