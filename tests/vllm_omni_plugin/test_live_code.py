"""Hardening round 4, class 1, for the vLLM-Omni plugin: the code that runs is the code checked.

`support` decides each path by source digests of the installed files; what runs is the live
function objects. Each way the running code can differ — an "offset noise" patch of a relied-on
function where it is defined and wherever it is bound, its `__code__` swapped, `torch.randn`
replaced — must give the plain (plugin off) bits with nothing prepared ahead, and one WARNING
naming what differs (`plugin._live_problem`, `live.problem`). A request through upstream's real
`MiniMaxH3Pipeline.forward` (`verify_request`: off, then on, compared field by field).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from release import PRENOISE_WORKER

from live_patches import offset_code, offset_everywhere
from prenoise.guards import live_code
from prenoise.integrations.vllm_omni import live, plugin, support
from prenoise.integrations.vllm_omni.verification import H3Request, VerifyResult, verify_request

_PACKED = "vllm_omni.diffusion.models.minimax_h3.packed_tokens"
_PATCHIFY = "minimax_h3_patchify_video_latent"


@pytest.fixture
def warnings_said(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The plugin's WARNING lines while the test runs (its once-per-process memory emptied)."""
    monkeypatch.setattr(plugin, "_said", set())
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno == logging.WARNING:
                lines.append(record.getMessage())

    handler = Collect()
    logger = logging.getLogger("prenoise.vllm_omni")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


def _request(image_ref: Path) -> H3Request:
    """A keyframe request (fl2va): prenoise prepares all its noise ahead on every release."""
    return H3Request((image_ref,), seed=9, task="fl2va")


def assert_plain(result: VerifyResult, lines: list[str], names: str) -> None:
    """On equals off bit for bit, nothing was drawn by prenoise, one line names `names`."""
    assert result.equal, result.report.summary()
    assert result.rng_state_unchanged
    assert not [t for t in result.on.drawn_on.values() if t.startswith(PRENOISE_WORKER)]
    assert not [r for r in result.on.records if r.used]
    (line,) = [line for line in lines if "the code that runs is not the reviewed code" in line]
    assert names in line and "upstream's code runs untouched" in line


@pytest.fixture
def offset_patchify() -> Iterator[None]:
    import vllm_omni.diffusion.models.minimax_h3.pipeline_minimax_h3  # noqa: F401 (binds it)

    with offset_everywhere("vllm_omni", _PACKED, _PATCHIFY):
        yield


def test_a_runtime_patch_of_a_relied_on_function_is_the_plain_call(
    image_ref: Path, warnings_said: list[str], offset_patchify: None
) -> None:
    result = verify_request(_request(image_ref))
    assert_plain(result, warnings_said, _PATCHIFY)
    assert "runs other code than its installed source" in str(result.on.skipped)


def test_a_swapped_code_object_is_the_plain_call(image_ref: Path, warnings_said: list[str]) -> None:
    """The function object stays; its `__code__` is the same source with an offset added."""
    with offset_code(_PACKED, _PATCHIFY, after=".contiguous()"):
        result = verify_request(_request(image_ref))
    assert_plain(result, warnings_said, _PATCHIFY)


def test_torch_randn_replaced_is_the_plain_call(
    image_ref: Path, warnings_said: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = torch.randn

    def offset(*args: Any, **kwargs: Any) -> torch.Tensor:
        return real(*args, **kwargs) + 0.125

    monkeypatch.setattr(torch, "randn", offset)
    try:
        result = verify_request(_request(image_ref))
    finally:
        monkeypatch.setattr(torch, "randn", real)
    assert_plain(result, warnings_said, "torch.randn is replaced at run time")


def test_the_reviewed_code_as_installed_is_prepared(
    image_ref: Path, warnings_said: list[str]
) -> None:
    """prenoise's own wrappers (and the verify probes) are looked through: the untouched code is
    prepared ahead, with no warning; the check's cost, first and cached, is printed."""
    plugin.install()
    try:
        live_code._forget()
        started = time.perf_counter()
        assert live.problem(support.H3_AHEAD_PATH) is None
        first = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(100):
            assert live.problem(support.H3_AHEAD_PATH) is None
        cached = (time.perf_counter() - started) / 100
    finally:
        plugin.uninstall()
    print(f"live check ({support.H3_AHEAD_PATH}): first {first * 1e3:.1f} ms, "
          f"cached {cached * 1e6:.0f} us")  # fmt: skip
    result = verify_request(_request(image_ref))
    assert result.verified, result.summary()
    assert [r for r in result.on.records if r.used]
    assert not [line for line in warnings_said if "the code that runs" in line]


def test_the_wan_path_looks_through_prenoises_hooks_and_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wan2.2 T2V's prepared-ahead path (`pipelines._ahead_runs`): prenoise's `forward` hook is
    looked through; a runtime wrapper around `prepare_latents` (whose draw is predicted) is
    named."""
    import pipeline_standins

    from prenoise.integrations.vllm_omni import pipelines

    wan, _i2v = pipeline_standins.import_wan()  # (a torchvision stand-in where it is missing)
    pipelines.install_stream_hooks()
    try:
        hook = wan.Wan22Pipeline.__dict__["forward"]
        assert live.unwrap(hook) is not None and live.unwrap(live.unwrap(hook)) is None
        assert live.problem(support.WAN_AHEAD_PATH) is None
        real = wan.Wan22Pipeline.prepare_latents

        def offset(*args: Any, **kwargs: Any) -> Any:
            return real(*args, **kwargs) + 0.125

        monkeypatch.setattr(wan.Wan22Pipeline, "prepare_latents", offset)
        found = str(live.problem(support.WAN_AHEAD_PATH))
        assert "Wan22Pipeline.prepare_latents" in found and "runs other code" in found
        assert not pipelines._ahead_runs(next(t for t in pipelines.TARGETS if t.kind == "ahead"))
    finally:
        pipelines.uninstall_stream_hooks()
