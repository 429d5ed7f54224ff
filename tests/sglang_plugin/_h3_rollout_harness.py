"""Shared harness of the SGLang rollout / noise-stream tests: a t2va rollout request through the
plugin's forward hook and upstream's real latent -> timestep -> denoising stages (fake DiT), and
every compared field fingerprinted as bytes (NaN-aware: the bytes of a NaN are compared as they
are), plus what upstream's rollout context held: the rollout generator and its final state.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from _h3_harness import FakeH3DiT, fingerprint, make_request, tensors

from prenoise.integrations.sglang import plugin
from prenoise.integrations.sglang.harness import rollout_contexts as rollout_contexts
from prenoise.preparation import lookahead


def rollout_request(
    h3: Any,
    seed: int,
    *,
    steps: int = 6,
    sde_type: str = "cps",
    noise_level: float = 0.7,
    sde_steps: list[int] | None = None,
    short_edge: int = 64,
    duration: float = 4.0,
) -> Any:
    """A t2va rollout request as a worker receives it (pre-queue plan shipped)."""
    return make_request(
        h3,
        seed,
        short_edge,
        duration,
        steps=steps,
        rollout=True,
        rollout_sde_type=sde_type,
        rollout_noise_level=noise_level,
        rollout_sde_step_indices=sde_steps,
    )


@contextlib.contextmanager
def worker_draws(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The thread name of every per-step draw the core's `StepLookahead` prepares."""
    names: list[str] = []
    original = lookahead.run_draw

    def recorded(*args: Any, **kwargs: Any) -> torch.Tensor:
        names.append(threading.current_thread().name)
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(lookahead, "run_draw", recorded)
        yield names


def run_rollout(
    h3: Any,
    req: Any,
    monkeypatch: pytest.MonkeyPatch,
    *,
    dit: Callable[[int, int, list[Any]], FakeH3DiT] | None = None,
) -> dict[str, Any]:
    """One rollout request through the plugin's forward hook and upstream's stages; every
    compared field (name -> fingerprint). `dit(video_rows, audio_rows, contexts)` makes the
    fake DiT (it may draw from the rollout generator: a step callback's place)."""
    fields: dict[str, Any] = {}

    def stages(_pipeline: Any, batch: Any, sa: Any) -> Any:
        batch = h3.LatentStage()(batch, sa)
        batch = h3.TimestepStage()(batch, sa)
        state = batch.extra["minimax_h3_denoise_state"]
        rows = (state["initial_video_rows"].shape[0], state["initial_audio_rows"].shape[0])
        fields["latent_shape"] = [
            1,
            24,
            *(int(state[k]) for k in ("latent_t", "latent_h", "latent_w")),
        ]
        model = dit(*rows, contexts) if dit is not None else FakeH3DiT(*rows)
        batch = h3.DenoisingStage(transformer=model)(batch, sa)
        for step, inputs in enumerate(model.inputs):
            for name, t in inputs.items():
                fields[f"dit[{step}].{name}"] = fingerprint(t)
        for name, t in tensors({"latents": batch.latents, "audio": batch.audio_latents}):
            fields[f"denoise_out{name}"] = fingerprint(t)
        for name, t in tensors(batch.extra):
            fields[f"extra{name}"] = fingerprint(t)
        data = batch.rollout_trajectory_data
        trajectory = data.dit_trajectory
        for name, t in tensors(
            {
                "latents": trajectory.latents,
                "timesteps": trajectory.timesteps,
                "sigmas": trajectory.sigmas,
                "log_probs": data.rollout_log_probs,
            }
        ):
            fields[f"rollout{name}"] = fingerprint(t)
        return batch

    with rollout_contexts() as contexts:
        pipeline = object.__new__(h3.Pipeline)
        plugin.around_forward(stages, pipeline, req, h3.SA)
    (ctx,) = contexts
    fields["generator.final_state"] = fingerprint(ctx.generator.get_state())
    fields["generator"] = ctx.generator  # not compared: the object itself (tests read it)
    fields["noise_buffer"] = ctx.noise_buffer
    return fields


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Names of fingerprinted fields that differ in anything (bytes included)."""
    names = {k for k in a if isinstance(a[k], tuple)} | {k for k in b if isinstance(b[k], tuple)}
    out = []
    for name in sorted(names):
        fa, fb = a.get(name), b.get(name)
        if fa is None or fb is None or fa[:4] != fb[:4] or not torch.equal(fa[4], fb[4]):
            out.append(name)
    return out
