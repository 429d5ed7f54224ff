"""One rank of `test_h3_two_ranks` (run by it as `pytest _h3_rank.py` in each rank's process;
not collected otherwise: no `test_` prefix).

The rank joins SGLang's own parallel state from the environment upstream's launcher sets
(`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`):
`maybe_init_distributed_environment_and_model_parallel(tp_size=WORLD_SIZE, sp_size=1)`, gloo on
the CPU, so the replica group spans both ranks. The plugin is loaded by SGLang's own loader
(the `h3` fixture). Each request runs with `PRENOISE_SGLANG=0`, then `1`, from the same global
RNG state, through the plugin's `forward` hook and, at the encoders' place, what a replica does:
the text payload is rank 0's, broadcast by upstream's `minimax_h3_replica_broadcast_extra`
(the text stage's own encoder-DP broadcast is not run: no text encoder), and the visual
conditions go through upstream's real `MiniMaxH3VisualEncodingStage._forward` (rank 0 encodes
with a fake VAE, the replica group broadcasts the rows); then every rank runs latent
preparation (drawing, or being served, its own noise), timestep preparation and denoising.
Writes every compared field of both runs, the draws the plugin prepared (label, seed, thread)
and the process id to `PRENOISE_RANK_OUT` (`torch.save`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from types import SimpleNamespace
from typing import Any

import torch
from _h3_harness import (
    FakeVideoVAE,
    fingerprint,
    make_request,
    recorded_draws,
    recorded_serves,
    run,
)

from prenoise.integrations.sglang import plugin

OUT_ENV = "PRENOISE_RANK_OUT"
IMAGES_ENV = "PRENOISE_RANK_IMAGES"
TEXT_KEY = "minimax_h3_text_embeddings"


def requests(images: list[str]) -> dict[str, dict[str, Any]]:
    """The requests each rank runs (also run single-process by the test, plugin off)."""
    first, last = images
    return {
        "t2va": {"seed": 2**40 + 7, "short_edge": 64, "duration": 4.0},
        "fl2va_first_last": {
            "seed": 19, "short_edge": 64, "duration": 4.0, "task": "fl2va",
            "aspect_ratio": "auto",
            "conditions": [
                {"type": "image", "uri": first, "role": "keyframe", "frame_index": 0},
                {"type": "image", "uri": last, "role": "keyframe", "frame_index": -1},
            ],
        },
        "ref2va_image": {
            "seed": 3, "short_edge": 96, "duration": 4.5, "task": "ref2va",
            "reference_resize_mode": "match",
            "conditions": [{"type": "image", "uri": first, "role": "reference"}],
        },
    }  # fmt: skip


def make(h3: Any, spec: dict[str, Any]) -> Any:
    spec = dict(spec)
    return make_request(h3, spec.pop("seed"), spec.pop("short_edge"), spec.pop("duration"), **spec)


def replica_encoders(h3: Any) -> Any:
    """The encoders' place on a rank of a replica (see the module docstring)."""
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3.stages.replica_broadcast import (  # noqa: E501
        minimax_h3_replica_broadcast_extra,
        minimax_h3_replica_ctx,
    )

    def encode(batch: Any) -> None:
        _world, rank = minimax_h3_replica_ctx()
        if rank != 0:
            batch.extra.pop(TEXT_KEY)  # only the owner rank encodes the prompt
        minimax_h3_replica_broadcast_extra(batch, TEXT_KEY)
        stage = object.__new__(h3.VisualStage)
        stage.video_vae = FakeVideoVAE()
        stage.vae_arch_config = SimpleNamespace(
            latent_channels=24, latents_mean=[0.1] * 24, latents_std=[0.9] * 24
        )
        stage.use_declared_component = lambda component_name, module: contextlib.nullcontext(module)
        stage._forward(batch, h3.SA)

    return encode


def test_rank(h3: Any) -> None:
    from sglang.multimodal_gen.runtime.distributed.parallel_state import (
        get_replica_group,
        maybe_init_distributed_environment_and_model_parallel,
    )

    world = int(os.environ["WORLD_SIZE"])
    maybe_init_distributed_environment_and_model_parallel(tp_size=world, sp_size=1)
    group = get_replica_group()
    assert (group.world_size, group.rank_in_group) == (world, int(os.environ["RANK"]))
    encode = replica_encoders(h3)
    results: dict[str, Any] = {"pid": os.getpid(), "rank": group.rank_in_group}
    start = torch.get_rng_state()
    results["rng_start"] = fingerprint(start)
    for name, spec in requests(os.environ[IMAGES_ENV].split(os.pathsep)).items():
        arms: dict[str, Any] = {}
        for setting in ("0", "1"):
            torch.set_rng_state(start)
            os.environ[plugin.ENABLE_ENV] = setting
            with recorded_draws() as seen, recorded_serves() as serves:
                fields = run(h3, make(h3, spec), before_latents=encode)
            fields.pop("served_ptrs")
            fields["rng"] = fingerprint(torch.get_rng_state())
            arms[setting] = {
                "fields": fields,
                "draws": [(label, seed, thread) for label, seed, thread, _p in seen],
                "serves": list(serves),
            }
        results[name] = arms
    assert [t.name for t in threading.enumerate() if t.name.startswith("prenoise")] == []
    torch.save(results, os.environ[OUT_ENV])
