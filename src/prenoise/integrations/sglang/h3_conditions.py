"""MiniMax-H3's visual-condition noise drawn ahead for one SGLang request.

SGLang 0.5.23 draws it in the Denoising stage (`_apply_condition_noise_aug` ->
`condition_noise.minimax_h3_imgvid_cond_noise_aug_rows`): for the `n` visual conditions of a
request (keyframes first, then the Ref2VA image / video references in plan order), each
condition `k` of latent shape `(t_k, h_k, w_k)` gets a fresh `torch.Generator("cpu").
manual_seed(seed)` and `torch.randn(1, 24, T + n, h_k, w_k)[:, :, :t_k]`, patchified to rows
`[t_k * h_k/2 * w_k/2, 96]` and mixed with the clean rows at the `noise_aug` level
(`t * clean + (1 - t) * noise`, `t` a float32 0-d tensor on the clean rows' device). `T` is the
target's latent length, `seed` the plan's (else the sampling seed, else 42).

`predict` reads the shapes at request entry from upstream's own resolved plan and resolved
material shapes (keyframes: the target canvas / 16; reference images: their resolved size / 16;
reference videos: the resolved size / 16 and the latent length of the target-capped frame count);
each condition's noise is then drawn on the request's worker with prenoise's keep-prefix draw
(the same bits, only the kept values transformed). `serve_rows` hands them over only when the
call's own arguments give the same key for every condition (`ConditionKey`: seed, `T + n`,
`t_k`, `h_k`, `w_k`), and then returns `mix(...)`, upstream's mixing arithmetic on the served
noise; otherwise (any difference, any argument upstream would refuse) it returns None and
upstream's function draws and mixes itself.

Bitwise: the served result equals upstream's function's result in values, shape, dtype, device
and strides (contiguous), since the noise rows are the same bits and `mix` performs upstream's
operations in upstream's order on them (tests/sglang_plugin compares it byte for byte). The
global RNG is never used.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from prenoise.guards.cancel import CancelEvent
from prenoise.noise.layouts import Patchify
from prenoise.preparation.draws import Draw, Stream, run_stream
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.served import KeyedDraw, ServedDraws

__all__ = [
    "ConditionKey",
    "DrawObserver",
    "call_keys",
    "mix",
    "predict",
    "submit",
]

LABEL = "visual_condition_noise"
_CHANNELS = 24
_FEATURES = 96
_DEFAULT_SEED = 42
_MATERIAL_SHAPES_KEY = "minimax_h3_resolved_material_shapes"
_KEYFRAME = "image.target_canvas"
_REFERENCE_IMAGE = "image.reference_preserve"
_REFERENCE_VIDEOS = ("video.reference_preserve", "video_audio.reference_preserve")
_H3 = "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3"

DrawObserver = Callable[[str, Any, str, torch.Tensor], None]


@dataclass(frozen=True)
class ConditionKey:
    """What one condition's noise rows depend on: the torch seed of its fresh generator, the
    drawn length `full_t` (`T + n`) and the kept latent shape."""

    seed: int
    full_t: int
    latent_t: int
    latent_h: int
    latent_w: int

    def draw(self, label: str) -> Draw:
        return Draw(
            label,
            (1, _CHANNELS, self.full_t, self.latent_h, self.latent_w),
            keep=(1, _CHANNELS, self.latent_t),
            layout=Patchify(),
        )

    @property
    def rows(self) -> int:
        return self.latent_t * (self.latent_h // 2) * (self.latent_w // 2)


def _torch_seed(seed: int) -> int | None:
    if not -(2**63) <= seed <= 2**64 - 1:
        return None
    return seed % 2**64


def _keys(seed: Any, target_t: Any, shapes: Sequence[Sequence[Any]]) -> tuple[ConditionKey, ...]:
    """Keys for `shapes`, or () where upstream's function would raise or draw nothing odd."""
    torch_seed = _torch_seed(int(seed))
    target_t, n = int(target_t), len(shapes)
    if torch_seed is None or target_t <= 0 or n == 0:
        return ()
    keys = []
    for shape in shapes:
        if len(shape) != 3:
            return ()
        t, h, w = (int(v) for v in shape)
        if min(t, h, w) <= 0 or h % 2 or w % 2 or t > target_t + n:
            return ()
        keys.append(ConditionKey(torch_seed, target_t + n, t, h, w))
    return tuple(keys)


def predict(batch: Any, plan: Any) -> tuple[tuple[ConditionKey, ...], str]:
    """The keys of the visual-condition draws the Denoising stage will make for `batch`, read
    from upstream's plan and resolved material shapes at request entry; `((), why)` when it
    draws none or the shapes cannot be told in advance."""
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3.reference_encoding import (  # noqa: E501
        _reference_video_target_frame_count,
    )
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3.stages.denoising import (  # noqa: E501
        minimax_h3_condition_noise_aug,
    )
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3.time_request import (  # noqa: E501
        minimax_h3_video_latent_t,
    )

    try:
        sampling = batch.sampling_params
        imgvid_aug, _audio = minimax_h3_condition_noise_aug(sampling)
        if not 0.0 <= imgvid_aug < 1.0:
            return (), f"imgvid_cond_noise_aug is {imgvid_aug}: no condition noise is drawn"
        shape, materials = plan.shape, list(plan.materials)
        seed = plan.seed if plan.seed is not None else getattr(sampling, "seed", None)
        seed = _DEFAULT_SEED if seed is None else seed
        material_shapes = batch.extra.get(_MATERIAL_SHAPES_KEY)
        if str(shape["geometry"]) != "resolved_v2" or not isinstance(material_shapes, Mapping):
            return (), "no pre-queue resolved plan and material shapes"
        canvas = (1, int(shape["height"]) // 16, int(shape["width"]) // 16)
        shapes = [canvas for m in materials if m.material_chain == _KEYFRAME]
        if str(plan.task) == "ref2va":
            for m in materials:
                chain = str(m.material_chain)
                if chain != _REFERENCE_IMAGE and chain not in _REFERENCE_VIDEOS:
                    continue
                size = material_shapes[int(m.condition_index)]
                h, w = int(size["height"]) // 16, int(size["width"]) // 16
                if chain == _REFERENCE_IMAGE:
                    shapes.append((1, h, w))
                else:  # a video as long as the target: its latent length is the target's
                    frames = _reference_video_target_frame_count(plan=plan)
                    shapes.append((minimax_h3_video_latent_t(frames), h, w))
        keys = _keys(seed, shape["video_latent_t"], shapes)
    except Exception as error:  # whatever upstream makes of it, it is not predicted here
        return (), f"condition shapes not predicted: {error!r}"
    return keys, "" if keys else "no visual condition"


def submit(
    executor: PreparationExecutor,
    keys: Sequence[ConditionKey],
    tag: str,
    observers: Sequence[DrawObserver],
    noise_stream: str = "native",
) -> ServedDraws:
    """One planned keep-prefix draw per condition (labels `visual_condition_noise.<k><tag>`),
    drawn in `noise_stream` (`native`: local torch's bits, upstream's)."""
    cancel = executor.cancel_event
    planned = [
        KeyedDraw(
            f"{LABEL}.{k}{tag}",
            key,
            _work(f"{LABEL}.{k}", key, cancel, observers, noise_stream),
        )
        for k, key in enumerate(keys)
    ]
    served = ServedDraws(executor, job_name=lambda _i, d: d.label)
    served.submit(planned)
    return served


def _work(
    label: str,
    key: ConditionKey,
    cancel: CancelEvent,
    observers: Sequence[DrawObserver],
    noise_stream: str,
) -> Callable[[tuple[torch.Generator, ...]], torch.Tensor]:
    def work(_clones: tuple[torch.Generator, ...]) -> torch.Tensor:
        stream = Stream(label, key.seed, (key.draw(label),), noise_stream=noise_stream)
        tensor = run_stream(stream, cancel=cancel)[label]
        for observer in list(observers):
            observer(label, key, threading.current_thread().name, tensor)
        return tensor

    return work


def call_keys(clean_rows: Any, kwargs: Mapping[str, Any]) -> tuple[tuple[ConditionKey, ...], float]:
    """The keys of the call `minimax_h3_imgvid_cond_noise_aug_rows(clean_rows, **kwargs)` and
    its mix level; `((), level)` where upstream's function returns the clean rows, raises, or
    the call is anything but the plain keyword call the Denoising stage makes."""
    expected = {"condition_shapes", "target_latent_t", "imgvid_cond_num_frames", "seed"}
    try:
        if set(kwargs) != expected | {"noise_aug"} or not torch.is_tensor(clean_rows):
            return (), 1.0
        noise_aug = float(kwargs["noise_aug"])
        shapes = [tuple(s) for s in kwargs["condition_shapes"]]
        if not 0.0 <= noise_aug < 1.0 or int(kwargs["imgvid_cond_num_frames"]) != len(shapes):
            return (), noise_aug  # n != len(shapes) is legal upstream: left to it
        if clean_rows.ndim != 2 or int(clean_rows.shape[1]) != _FEATURES:
            return (), noise_aug
        keys = _keys(kwargs["seed"], kwargs["target_latent_t"], shapes)
    except (TypeError, ValueError, OverflowError):
        return (), 1.0
    if sum(k.rows for k in keys) != int(clean_rows.shape[0]):
        return (), noise_aug
    return keys, noise_aug


def mix(clean_rows: torch.Tensor, noise: Sequence[torch.Tensor], noise_aug: float) -> torch.Tensor:
    """Upstream's mix (0.5.23 `minimax_h3_imgvid_cond_noise_aug_rows`, after its draws), the same
    operations in the same order: per condition the noise rows moved to the clean rows' device
    as float32, `t * clean + (1 - t) * noise` with `t` a float32 0-d tensor, concatenated."""
    out: list[torch.Tensor] = []
    row_offset = 0
    timestep = torch.tensor(noise_aug, dtype=torch.float32, device=clean_rows.device)
    for rows in noise:
        noise_rows = rows.to(device=clean_rows.device, dtype=torch.float32)
        row_count = int(noise_rows.shape[0])
        clean_part = clean_rows[row_offset : row_offset + row_count].to(torch.float32)
        out.append(timestep * clean_part + (1.0 - timestep) * noise_rows)
        row_offset += row_count
    return (out[0] if len(out) == 1 else torch.cat(out, dim=0)).contiguous()
