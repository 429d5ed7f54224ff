"""Hardening round 4, class 1, for the SGLang plugin: the code that runs is the code checked.

`support` decides each path by source digests of the installed files; what runs is the live
function objects. Each way the running code can differ — an "offset noise" patch of a relied-on
function where it is defined and wherever it is bound, its `__code__` swapped, another plugin's
AROUND hook inside prenoise's, `torch.randn` replaced — must give the plain (plugin off) bits,
nothing prepared, and one WARNING naming what differs (`plugin._active`, `live.problem`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from _h3_harness import make_request, recorded_draws, run, same

from live_patches import offset_code, offset_everywhere
from prenoise.guards import live_code
from prenoise.integrations.sglang import live, plugin, support

_H3 = "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3."
_PACKED = _H3 + "packed_tokens"
_PATCHIFY = "minimax_h3_patchify_video_latent"


def both_arms(
    h3: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, seed: int = 5
) -> tuple[dict[str, Any], dict[str, Any], list[Any], list[str]]:
    """Plugin off, then on (the same global RNG before each); what the on arm prepared and the
    prenoise WARNING lines it logged."""
    monkeypatch.setattr(plugin, "_said", set())
    start = torch.get_rng_state()
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run(h3, make_request(h3, seed, 64, 4.0))
    torch.set_rng_state(start)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="prenoise.sglang"), recorded_draws() as seen:
        on = run(h3, make_request(h3, seed, 64, 4.0))
        run(h3, make_request(h3, seed, 64, 4.0))  # a second request: no second line
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "prenoise.sglang" and r.levelno == logging.WARNING
    ]
    return off, on, seen, lines


@pytest.fixture
def offset_patchify(h3: Any) -> Iterator[None]:
    with offset_everywhere("sglang", _PACKED, _PATCHIFY):
        yield


def test_a_runtime_patch_of_a_relied_on_function_is_the_plain_call(
    h3: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    offset_patchify: None,
) -> None:
    off, on, seen, lines = both_arms(h3, monkeypatch, caplog)
    assert same(off, on) == [] and seen == []
    (line,) = lines
    assert _PATCHIFY in line and "runs other code than its installed source" in line
    assert support.H3_INITIAL_PATH in line


def test_a_swapped_code_object_is_the_plain_call(
    h3: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The function object stays; its `__code__` is the same source with an offset added."""
    with offset_code(_PACKED, _PATCHIFY, after=".contiguous()"):
        off, on, seen, lines = both_arms(h3, monkeypatch, caplog)
    assert same(off, on) == [] and seen == []
    (line,) = lines
    assert _PATCHIFY in line and "runs other code than its installed source" in line


def test_a_foreign_hook_inside_prenoises_is_the_plain_call(
    h3: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another plugin's AROUND hook (SGLang's own wrapper) between prenoise's hook and
    upstream's `_prepare_denoise_state_from_plan`, which changes the plan's seed: prenoise's
    prepared state (the entry's seed) must not be served."""
    import msgspec
    from sglang.srt.plugins.hook_registry import HookType, _wrap_fn

    stage = h3.LatentStage
    ours = stage.__dict__["_prepare_denoise_state_from_plan"]
    upstream = live.unwrap(ours)
    assert upstream is not None and live.unwrap(upstream) is None

    def reseed(original: Callable[..., Any], self: Any, batch: Any, plan: Any) -> Any:
        return original(self, batch, msgspec.structs.replace(plan, seed=plan.seed + 1))

    foreign = _wrap_fn(upstream, reseed, HookType.AROUND)  # registered before prenoise's
    hooked = _wrap_fn(foreign, plugin.around_prepare_denoise_state, HookType.AROUND)
    monkeypatch.setattr(stage, "_prepare_denoise_state_from_plan", hooked)
    off, on, seen, lines = both_arms(h3, monkeypatch, caplog)
    assert same(off, on) == [] and seen == []
    (line,) = lines
    assert "_prepare_denoise_state_from_plan" in line and "_wrap_fn.<locals>.wrapper" in line


def test_torch_randn_replaced_is_the_plain_call(
    h3: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = torch.randn

    def offset(*args: Any, **kwargs: Any) -> torch.Tensor:
        return real(*args, **kwargs) + 0.125

    monkeypatch.setattr(torch, "randn", offset)
    off, on, seen, lines = both_arms(h3, monkeypatch, caplog)
    monkeypatch.setattr(torch, "randn", real)
    assert same(off, on) == [] and seen == []
    (line,) = lines
    assert "torch.randn is replaced at run time" in line


def test_the_reviewed_code_as_hooked_is_served(
    h3: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """prenoise's own HookRegistry wrappers are looked through: the untouched code is served,
    with no warning; the check's cost, first and cached, is printed."""
    live_code._forget()
    started = time.perf_counter()
    assert live.problem(support.H3_STREAMS_PATH) is None
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(100):
        assert live.problem(support.H3_STREAMS_PATH) is None
    cached = (time.perf_counter() - started) / 100
    print(f"live check ({support.H3_STREAMS_PATH}): first {first * 1e3:.1f} ms, "
          f"cached {cached * 1e6:.0f} us")  # fmt: skip
    off, on, seen, lines = both_arms(h3, monkeypatch, caplog)
    assert same(off, on) == [] and len(seen) == 4 and lines == []  # two requests' draws
