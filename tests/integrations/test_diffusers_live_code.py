"""Hardening round 4, class 1: the code that runs is the code checked.

Support is decided by source digests of the installed files; what runs is the live function
objects. Each way the running code can differ from the reviewed files — `randn_tensor` patched
where diffusers defines it and wherever it is bound, its `__code__` swapped, `torch.randn`
replaced, `WanPipeline.__call__` wrapped at run time by code that draws from or reseeds the
caller's generator, a method set on the instance — must give the plain call's bits, with the
reason naming what differs. (Stale bytecode and the lying generator: test_live_code.py and
test_served_draws.py, at their roots.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("diffusers")

import torch
from diffusers_tiny import assert_bitwise_equal, call_kwargs, generators, output_tensor

from live_patches import offset_everywhere
from prenoise.integrations.diffusers import overlapped_call_with_report


def _arms(pipe: Any, kwargs: dict[str, Any], seed: int = 3) -> tuple[Any, Any, Any]:
    pg, og = generators([seed]), generators([seed])
    plain = pipe(generator=pg[0], **kwargs)
    overlapped, report = overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert torch.equal(pg[0].get_state(), og[0].get_state())
    return plain, overlapped, report


@pytest.fixture
def offset_noise(tiny: Any) -> Iterator[None]:
    tiny("wan21")  # its modules imported (and bound) before the patch, so the patch reaches them
    # where diffusers defines it and in every loaded diffusers module that bound it
    with offset_everywhere("diffusers", "diffusers.utils.torch_utils", "randn_tensor"):
        yield


def test_a_runtime_randn_tensor_patch_is_the_plain_call(tiny: Any, offset_noise: None) -> None:
    pipe, kwargs = tiny("wan21"), call_kwargs("wan21")
    plain, overlapped, report = _arms(pipe, kwargs)
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert not report.overlapped and report.served == 0
    assert "randn_tensor (diffusers.utils.torch_utils) runs other code" in str(report.reason)


def test_a_swapped_code_object_is_the_plain_call(tiny: Any) -> None:
    from diffusers.pipelines.wan.pipeline_wan import WanPipeline

    prepare = WanPipeline.prepare_latents
    real = prepare.__code__  # the same function object gets other code: one more constant
    pipe, kwargs = tiny("wan21"), call_kwargs("wan21")
    prepare.__code__ = real.replace(co_consts=(*real.co_consts, "prenoise-test"))
    try:
        plain, overlapped, report = _arms(pipe, kwargs)
    finally:
        prepare.__code__ = real
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert not report.overlapped
    assert "WanPipeline.prepare_latents" in str(report.reason)
    assert "runs other code" in str(report.reason)


def test_torch_randn_replaced_is_the_plain_call(tiny: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    real = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, **k: real(*a, **k) * 2)
    pipe, kwargs = tiny("wan21"), call_kwargs("wan21")
    plain, overlapped, report = _arms(pipe, kwargs)
    monkeypatch.undo()
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert not report.overlapped and "torch.randn is replaced" in str(report.reason)


@pytest.mark.parametrize("wrapper", ["draws", "reseeds"])
def test_a_runtime_wrapper_around_call_is_the_plain_call(tiny: Any, wrapper: str) -> None:
    """A `functools.wraps` wrapper that draws once from the caller's generator, or reseeds it,
    before the pipeline's own `__call__`: enabled equals plain, and the reason names it."""
    from diffusers.pipelines.wan.pipeline_wan import WanPipeline

    inner = WanPipeline.__dict__["__call__"]

    @functools.wraps(inner)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        generator = kwargs.get("generator")
        if wrapper == "draws":
            torch.randn(7, generator=generator)
        else:
            generator.manual_seed(99)
        return inner(self, *args, **kwargs)

    pipe, kwargs = tiny("wan21"), call_kwargs("wan21")
    WanPipeline.__call__ = wrapped
    try:
        plain, overlapped, report = _arms(pipe, kwargs)
    finally:
        WanPipeline.__call__ = inner
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert not report.overlapped and "WanPipeline.__call__" in str(report.reason)
    assert "runs other code" in str(report.reason)
    _, _, again = _arms(pipe, kwargs)  # the original back in place: overlapped again
    assert again.overlapped and again.served == len(again.planned)


def test_a_method_set_on_the_instance_is_the_plain_call(tiny: Any) -> None:
    pipe, kwargs = tiny("wan21"), call_kwargs("wan21")
    real: Callable[..., Any] = pipe.prepare_latents
    pipe.prepare_latents = lambda *a, **k: real(*a, **k)
    try:
        plain, overlapped, report = _arms(pipe, kwargs)
    finally:
        del pipe.prepare_latents
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert not report.overlapped
    assert "WanPipeline.prepare_latents is set on the instance" in str(report.reason)


def test_the_reviewed_code_as_it_runs_still_overlaps(tiny: Any) -> None:
    """The check passes the untouched code (torch.no_grad's wrapper around `__call__` included)."""
    pipe, kwargs = tiny("wan21"), call_kwargs("wan21")
    plain, overlapped, report = _arms(pipe, kwargs)
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert report.overlapped and report.served == len(report.planned)
