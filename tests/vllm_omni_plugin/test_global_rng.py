"""The plugin's worker never touches the global RNG the request thread draws from.

H3's video VAE encodes under `torch.random.fork_rng` with the default generator reseeded
(`MINIMAX_H3_KEYFRAME_ENCODE_SEED`), and a real checkpoint samples its latent from that
generator. Here the stand-in VAE does the same: its latent gets a term drawn from the global
RNG, inside upstream's fork_rng. `Handshake` (tests/rng_contention.py) parks the plugin's first
worker draw until the request thread is inside that encode and has drawn the global RNG, so the
worker's draw certainly runs between the request thread's global draws: a worker that drew from
the global generator would change the encoded latent (checked: it does).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from bitwise import bitwise_equal
from prenoise.integrations.vllm_omni import plugin, request, standins
from prenoise.integrations.vllm_omni.verification import H3Request
from rng_contention import Handshake


def _sampling_vae(
    monkeypatch: pytest.MonkeyPatch, handshake: Handshake, latents: list[torch.Tensor]
) -> None:
    """The stand-in VAE's image latent plus a global-RNG sample, as a real posterior draws."""
    encode = standins._VideoVAEModel.encode_images

    def encode_images(self: Any, image: Any, use_fp16_latent: bool = True) -> list[torch.Tensor]:
        (latent,) = encode(self, image, use_fp16_latent)
        sample = handshake.request_side(lambda: torch.randn(latent.shape))
        latents.append(latent + 1e-2 * sample)
        return [latents[-1]]

    monkeypatch.setattr(standins._VideoVAEModel, "encode_images", encode_images)


def _run(
    req: H3Request, on: bool, handshake: Handshake, latents: list[torch.Tensor]
) -> tuple[Any, ...]:
    """The encoded latent, both outputs and the global RNG state after one `forward`."""
    (plugin.install if on else plugin.uninstall)()
    if on:
        handshake.arm()
    torch.manual_seed(1234)  # the global RNG as the process left it
    video, audio = standins.build_pipeline().forward(req.forward_request()).output
    return latents.pop(), video, audio, torch.get_rng_state()


@pytest.mark.parametrize("worker_draws_global", [False, True])
def test_the_worker_leaves_the_global_rng_to_the_request_thread(
    monkeypatch: pytest.MonkeyPatch, image_ref: Path, worker_draws_global: bool
) -> None:
    handshake, latents = Handshake("prenoise-vllm-omni"), list[torch.Tensor]()
    _sampling_vae(monkeypatch, handshake, latents)
    run_stream = request.run_stream

    def worker_draw(*args: Any, **kwargs: Any) -> Any:
        if worker_draws_global:  # the defect this test exists to catch, made on purpose
            torch.randn(16)
        return run_stream(*args, **kwargs)

    draw: Callable[..., Any] = handshake.wrap(worker_draw)
    monkeypatch.setattr(request, "run_stream", draw)
    req = H3Request((image_ref,), seed=5, steps=1, outputs=2)
    off = _run(req, False, handshake, latents)
    on = _run(req, True, handshake, latents)
    assert handshake.met  # the worker's first draw ran inside the request thread's encode
    same = [bitwise_equal(a, b) for a, b in zip(off, on, strict=True)]
    if worker_draws_global:  # the encoded latent moved
        assert same[0] is False
    else:  # the encoded latent, the outputs, the global RNG state after
        assert same == [True, True, True, True]
