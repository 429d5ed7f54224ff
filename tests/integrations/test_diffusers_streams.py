"""`enable(pipe, stream=...)`: every `randn_tensor` draw of a call is made in the named noise
stream — prepared on the worker or on the plain (fall-through) path — never in local torch's."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("diffusers")

from diffusers_tiny import (
    assert_outputs_bitwise_equal,
    assert_same_states,
    call_kwargs,
    generators,
    output_tensor,
)

from prenoise.integrations.diffusers import disable, enable, overlapped_call_with_report
from prenoise.integrations.diffusers.enabling import original_class
from prenoise.integrations.diffusers.streams import plain_in_stream as _plain_in_stream

LOCAL_X86 = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def _expected(pipe: Any, stream: str, kwargs: dict[str, Any], gen: Any) -> Any:
    """The plain call with diffusers' `randn_tensor` answered by the stream, serially."""
    return _plain_in_stream(original_class(pipe).__call__, stream, pipe, generator=gen, **kwargs)


@pytest.mark.parametrize("name", ["wan21", "ltx2"])
def test_enabled_stream_draws_every_call_in_that_stream(tiny: Any, name: str) -> None:
    pipe = tiny(name)
    kwargs = call_kwargs(name)
    expected_gens, gens = generators([7]), generators([7])
    expected = _expected(pipe, "libm", kwargs, expected_gens[0])
    enable(pipe, stream="libm")
    try:
        output, report = overlapped_call_with_report(pipe, generator=gens[0], **kwargs)
    finally:
        disable(pipe)
    assert report.overlapped and report.stream == "libm"
    assert report.served == len(report.planned)
    assert_outputs_bitwise_equal(expected, output)
    assert_same_states(expected_gens, gens)
    if LOCAL_X86:  # local torch draws x86 here: the libm output must differ from plain
        plain = pipe(generator=generators([7])[0], **kwargs)
        assert not torch.equal(output_tensor(plain), output_tensor(output))


@pytest.mark.skipif(not LOCAL_X86, reason="local torch does not draw the x86 stream")
def test_x86_stream_equals_plain_calls_on_an_avx_host(tiny: Any) -> None:
    pipe = tiny("wan21")
    kwargs = call_kwargs("wan21")
    plain_gens, gens = generators([3]), generators([3])
    plain = pipe(generator=plain_gens[0], **kwargs)
    enable(pipe, stream="x86")
    try:
        output = pipe(generator=gens[0], **kwargs)
    finally:
        disable(pipe)
    assert_outputs_bitwise_equal(plain, output)
    assert_same_states(plain_gens, gens)


def test_fall_through_calls_also_draw_in_the_stream(tiny: Any) -> None:
    """generator=None is unpredictable: the plain call runs, its draws still in the stream."""
    pipe = tiny("wan21")
    kwargs = call_kwargs("wan21")
    saved = torch.get_rng_state()
    try:
        torch.manual_seed(5)
        expected = _expected(pipe, "libm", kwargs, None)
        torch.manual_seed(5)
        enable(pipe, stream="libm")
        output, report = overlapped_call_with_report(pipe, generator=None, **kwargs)
    finally:
        disable(pipe)
        torch.set_rng_state(saved)
    assert not report.overlapped and report.stream == "libm"
    assert_outputs_bitwise_equal(expected, output)


def test_enable_validates_the_stream_name(tiny: Any) -> None:
    pipe = tiny("wan21")
    with pytest.raises(ValueError, match="unknown noise stream"):
        enable(pipe, stream="arm64")
    assert type(pipe) is original_class(pipe)  # nothing enabled
