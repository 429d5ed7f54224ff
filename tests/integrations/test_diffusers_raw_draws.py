"""A planned pipeline's own `torch.randn` draws in the named noise stream (`raw_draws.py`).

`LTXImageToVideoPipeline` draws its decode noise with `torch.randn` inline in `__call__`, not
through `randn_tensor`. With `enable(pipe, stream=...)` it is drawn in the stream too: the
enabled call equals the original `__call__` run with *every* standard-normal draw in the stream
(`prenoise.noise.stream_mode.draws_in_stream`), bit for bit, generator states included. In `native`
nothing is entered and the enabled call equals the plain call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

pytest.importorskip("diffusers")

from diffusers_tiny import (
    assert_bitwise_equal,
    assert_outputs_bitwise_equal,
    assert_same_states,
    call_kwargs,
    generators,
    ltx,
    output_tensor,
)

from prenoise.integrations.diffusers import disable, enable, overlapped_call_with_report, raw_draws
from prenoise.integrations.diffusers.enabling import original_class
from prenoise.integrations.diffusers.streams import plain_in_stream as _plain_in_stream
from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import draws_in_stream
from prenoise.noise.streams import NoiseStreamError

LOCAL_X86 = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
NAME = "ltx_i2v"


def modes() -> int:
    """Torch function modes entered on this thread."""
    return int(torch._C._len_torch_function_stack())


@pytest.fixture
def decode_modes(tiny: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The modes entered each time the VAE decodes (right after the decode noise is drawn)."""
    vae = tiny(NAME).vae
    seen: list[int] = []
    decode = vae.decode

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(modes())
        return decode(*args, **kwargs)

    monkeypatch.setattr(vae, "decode", spy)
    yield seen


@pytest.fixture
def enabled(tiny: Any) -> Iterator[Callable[[str], Any]]:
    pipe = tiny(NAME)

    def on(stream: str) -> Any:
        return enable(pipe, stream=stream)

    yield on
    disable(pipe)


def all_in_stream(pipe: Any, stream: str, generator: Any, kwargs: dict[str, Any]) -> Any:
    """The original call with every standard-normal draw it makes drawn in `stream`."""
    with draws_in_stream(stream):
        return original_class(pipe).__call__(pipe, generator=generator, **kwargs)


def test_native_enabled_call_is_the_plain_call_and_enters_no_mode(
    tiny: Any, enabled: Callable[[str], Any], decode_modes: list[int]
) -> None:
    pipe = tiny(NAME)
    kwargs = call_kwargs(NAME)
    pg, og = generators([11]), generators([11])
    plain = pipe(generator=pg[0], **kwargs)
    enabled("native")
    output, report = overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert report.overlapped and report.stream == "native" and report.raw_in_stream == 0
    assert_outputs_bitwise_equal(plain, output)
    assert_same_states(pg, og)
    assert decode_modes == [0, 0] and modes() == 0


def test_the_decode_noise_is_drawn_in_the_stream(
    tiny: Any, enabled: Callable[[str], Any], decode_modes: list[int]
) -> None:
    pipe = tiny(NAME)
    kwargs = call_kwargs(NAME)
    eg, og = generators([12]), generators([12])
    expected = all_in_stream(pipe, "libm", eg[0], kwargs)
    decode_modes.clear()
    enabled("libm")
    output, report = overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert report.overlapped and report.served == len(report.planned) == 2
    assert report.stream == "libm" and report.raw_in_stream == 1
    assert_outputs_bitwise_equal(expected, output)
    assert_same_states(eg, og)
    assert decode_modes == [1] and modes() == 0  # open at the decode, left after the call
    if LOCAL_X86:  # the decode noise really is a different draw without the window
        only_randn_tensor = _plain_in_stream(
            original_class(pipe).__call__, "libm", pipe, generator=generators([12])[0], **kwargs
        )
        assert not torch.equal(output_tensor(only_randn_tensor), output_tensor(output))


def test_a_plain_fall_through_call_draws_it_in_the_stream_too(
    tiny: Any, enabled: Callable[[str], Any]
) -> None:
    """generator=None runs the plain call (the global RNG): the decode noise still in the stream."""
    pipe = tiny(NAME)
    kwargs = call_kwargs(NAME)
    saved = torch.get_rng_state()
    try:
        torch.manual_seed(5)
        expected = all_in_stream(pipe, "libm", None, kwargs)
        after_expected = torch.get_rng_state()
        torch.manual_seed(5)
        enabled("libm")
        output, report = overlapped_call_with_report(pipe, generator=None, **kwargs)
        assert torch.equal(after_expected, torch.get_rng_state())
    finally:
        torch.set_rng_state(saved)
    assert not report.overlapped and report.raw_in_stream == 1
    assert_outputs_bitwise_equal(expected, output)


def test_a_class_plain_for_other_changed_code_still_draws_it_in_the_stream(
    tiny: Any, enabled: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The class runs plain (its `prepare_latents` is not the reviewed code), the window's own
    code (`__call__`, `_denormalize_latents`) is: the decode noise is drawn in the stream."""
    from prenoise.integrations.diffusers import digests

    pipe = tiny(NAME)
    kwargs = call_kwargs(NAME)
    eg, og = generators([13]), generators([13])
    expected = all_in_stream(pipe, "libm", eg[0], kwargs)
    enabled("libm")
    changed = {k: dict(v) for k, v in digests._reviewed.items()}
    key = "diffusers.pipelines.ltx.pipeline_ltx_image2video:LTXImageToVideoPipeline.prepare_latents"
    changed[key] = {"0123456789ab": ("0.42.1",)}
    monkeypatch.setattr(digests, "_reviewed", changed)
    monkeypatch.setattr(digests, "_problems", {})
    monkeypatch.setattr(digests, "_verdicts", {})
    output, report = overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert not report.overlapped and "LTXImageToVideoPipeline.prepare_latents" in str(report.reason)
    assert report.raw_in_stream == 1
    assert_outputs_bitwise_equal(expected, output)
    assert_same_states(eg, og)


@pytest.mark.skipif(not LOCAL_X86, reason="local torch does not draw the x86 stream")
def test_x86_stream_equals_the_plain_call_on_an_avx_host(
    tiny: Any, enabled: Callable[[str], Any]
) -> None:
    pipe = tiny(NAME)
    kwargs = call_kwargs(NAME)
    pg, og = generators([14]), generators([14])
    plain = pipe(generator=pg[0], **kwargs)
    enabled("x86")
    output, report = overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert report.raw_in_stream == 1
    assert_outputs_bitwise_equal(plain, output)
    assert_same_states(pg, og)


def test_a_latent_output_never_opens_the_window(
    tiny: Any, enabled: Callable[[str], Any], decode_modes: list[int]
) -> None:
    pipe = tiny(NAME)
    kwargs = {**call_kwargs(NAME), "output_type": "latent"}
    eg, og = generators([15]), generators([15])
    expected = all_in_stream(pipe, "libm", eg[0], kwargs)
    enabled("libm")
    output, report = overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert report.raw_in_stream == 0 and decode_modes == []
    assert_outputs_bitwise_equal(expected, output)
    assert_same_states(eg, og)


def test_the_window_is_left_when_the_call_raises(
    tiny: Any, enabled: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = tiny(NAME)
    seen: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        seen.append(modes())
        raise RuntimeError("decode failed")

    monkeypatch.setattr(pipe.vae, "decode", failing)
    enabled("libm")
    with pytest.raises(RuntimeError, match="decode failed"):
        pipe(generator=generators([16])[0], **call_kwargs(NAME))
    assert seen == [1] and modes() == 0


def test_without_timestep_conditioning_nothing_is_armed() -> None:
    pipe = ltx(image_to_video=True, timestep_conditioning=False)
    enable(pipe, stream="libm")
    assert raw_draws.call_window(original_class(pipe), pipe, "libm") is None
    kwargs = call_kwargs(NAME)
    eg, og = generators([17]), generators([17])
    expected = all_in_stream(pipe, "libm", eg[0], kwargs)
    output, report = overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert report.raw_in_stream == 0
    assert_outputs_bitwise_equal(expected, output)
    assert_same_states(eg, og)


def test_an_armed_window_that_cannot_open_refuses_before_the_call(tiny: Any) -> None:
    """A pipe whose class lacks the opening wrapper (not enabled): NoiseStreamError, never a
    silently native decode noise; `native` arms nothing."""
    pipe = tiny(NAME)
    cls = original_class(pipe)
    assert raw_draws.call_window(cls, pipe, "native") is None
    with pytest.raises(NoiseStreamError, match="_denormalize_latents"):
        raw_draws.call_window(cls, pipe, "libm")


def test_the_window_mode_serves_its_budget_then_passes_through() -> None:
    g, expected = generators([21, 21])
    mode = raw_draws._WindowMode("libm", 1)
    with mode:
        first = torch.randn(40, generator=g)
        second = torch.randn(40, generator=g)
    assert mode.served == 1
    assert_bitwise_equal(first, noise_streams.randn((40,), generator=expected, stream="libm"))
    assert_bitwise_equal(second, torch.randn(40, generator=expected))
    assert_same_states([g], [expected])


def test_each_call_of_the_opening_method_restarts_the_budget() -> None:
    window = raw_draws.CallWindow("libm", raw_draws.windows()[raw_draws._path(ltx_class())])
    g, expected = generators([22, 22])
    try:
        window.open()
        torch.randn(40, generator=g)  # e.g. a step callback's own draw after a preview decode
        window.open()  # the pipeline's own `_denormalize_latents` before the decode noise
        last = torch.randn(40, generator=g)
    finally:
        window.close()
    assert window.served == 2 and modes() == 0
    noise_streams.randn((40,), generator=expected, stream="libm")
    assert_bitwise_equal(last, noise_streams.randn((40,), generator=expected, stream="libm"))


def test_no_generator_on_another_device_draws_the_default_cpu_generator() -> None:
    """As `stream_randn_tensor` does for `generator=None`: drawn on the CPU, then moved."""
    saved = torch.get_rng_state()
    try:
        torch.manual_seed(23)
        with raw_draws._WindowMode("libm", 1):
            moved = torch.randn((4, 10), device="meta", dtype=torch.float32)
        after = torch.get_rng_state()
        torch.manual_seed(23)
        reference = noise_streams.randn(
            (4, 10), generator=torch.default_generator, stream="libm", dtype=torch.float32
        )
        assert torch.equal(after, torch.get_rng_state())
    finally:
        torch.set_rng_state(saved)
    assert moved.device.type == "meta" and moved.shape == reference.shape
    assert moved.dtype == reference.dtype


def ltx_class() -> type:
    from diffusers import LTXImageToVideoPipeline

    return LTXImageToVideoPipeline
