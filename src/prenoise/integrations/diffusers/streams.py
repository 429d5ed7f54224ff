"""Named noise streams for diffusers pipelines: `enable(pipe, stream="x86")`.

With a non-native stream every `randn_tensor` call the pipeline makes during a call — prepared
on the worker, or drawn on the request thread when the call falls through to the plain path —
is drawn in that stream (`prenoise.noise.streams`), never silently in local torch's. Of the
draws a pipeline makes with `torch.randn` itself only those `raw_draws.py` lists are covered (LTX
image-to-video's decode noise); docs/diffusers.md lists the rest. The draws need CPU generators (or
none: then the default CPU generator), strided layout, and are moved to the requested device
afterwards, as `randn_tensor` does.
"""

from __future__ import annotations

from typing import Any

import torch

from prenoise.integrations.diffusers.patching import RandnTensor, replay_context
from prenoise.noise import streams as noise_streams
from prenoise.noise.streams import NoiseStreamError

__all__ = [
    "STREAM_ATTR",
    "StreamTarget",
    "noise_stream_of",
    "plain_in_stream",
    "stream_randn_tensor",
]

#: Instance attribute where `enable(pipe, stream=...)` records a non-native stream.
STREAM_ATTR = "_prenoise_noise_stream"


def noise_stream_of(pipe: Any) -> str:
    """The noise stream `enable` recorded for `pipe` ("native" when none)."""
    stream = getattr(pipe, STREAM_ATTR, noise_streams.NATIVE)
    return noise_streams.check_stream_name(stream)


def stream_randn_tensor(
    stream: str,
    shape: Any,
    generator: Any = None,
    device: Any = None,
    dtype: Any = None,
    layout: Any = None,
) -> torch.Tensor:
    """diffusers' `randn_tensor(shape, generator, device, dtype, layout)` drawn in `stream`."""
    target = torch.device(device) if isinstance(device, str) else (device or torch.device("cpu"))
    if layout not in (None, torch.strided):
        raise NoiseStreamError(f"noise stream {stream!r} draws strided tensors, not {layout}")
    gens = generator if isinstance(generator, list) else [generator]
    if generator is None:
        gens = [torch.default_generator]
    if any(not isinstance(g, torch.Generator) or g.device.type != "cpu" for g in gens):
        raise NoiseStreamError(
            f"noise stream {stream!r} draws on the CPU: pass CPU generators, not {generator!r}"
        )
    dtype = dtype if dtype is not None else torch.get_default_dtype()
    if len(gens) == 1:
        out = noise_streams.randn(tuple(shape), generator=gens[0], stream=stream, dtype=dtype)
    else:
        row = (1, *tuple(shape)[1:])
        out = torch.cat(
            [
                noise_streams.randn(row, generator=gens[i], stream=stream, dtype=dtype)
                for i in range(shape[0])
            ]
        )
    return out.to(target)


class StreamTarget:
    """Replay target of a plain (fall-through) call: every `randn_tensor` call in `stream`."""

    def __init__(self, stream: str) -> None:
        self.stream = stream

    def serve(self, original: RandnTensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        del original  # never local torch's stream
        return stream_randn_tensor(self.stream, *args, **kwargs)


def plain_in_stream(plain: Any, stream: str, pipe: Any, *args: Any, **kwargs: Any) -> Any:
    """The plain call `plain(pipe, ...)` with every `randn_tensor` draw made in the non-native
    `stream`."""
    with replay_context(StreamTarget(stream)):
        return plain(pipe, *args, **kwargs)
