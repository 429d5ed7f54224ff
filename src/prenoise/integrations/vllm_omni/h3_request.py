"""One request to the MiniMax-H3 pipeline, as `vllm-omni-verify` and the tests build it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prenoise.integrations.vllm_omni.reference_kinds import reference_kind

__all__ = ["KINDS", "H3Request", "multi_modal_data", "request_of_kind"]

KINDS = ("ref2va", "t2va", "fl2va", "continuation", "guided")
"""The request kinds `vllm-omni-verify --kind` builds (`request_of_kind`)."""


@dataclass(frozen=True)
class H3Request:
    """One Ref2VA request to the H3 pipeline.

    `references` are image, video or audio files, typed by their content
    (`reference_kinds.reference_kind`), never by their names; upstream conditions on images, then
    videos, then audio, each kind in the order given here. `task`: `ref2va` (the default),
    `t2va` (no references) or `fl2va` (one or two keyframe images: the first, or first and last).
    """

    references: tuple[Path, ...]
    seed: int = 42
    duration: float = 4.0
    width: int = 256
    height: int = 256
    outputs: int = 1
    steps: int = 2
    prompt: str = "a red fox runs through fresh snow"
    task: str = "ref2va"
    guides: tuple[tuple[int, Path], ...] = ()
    """Timeline guides (vllm-omni 0.32.0rc1 on): `(frame_index, image or video file)` each."""
    continuation: bool = False
    """A Ref2VA continuation request: windows of 107 frames overlapping by 22."""

    def forward_request(self) -> Any:
        """The `DiffusionRequestBatch`-like object `forward` reads (one prompt)."""
        from vllm_omni.inputs.data import OmniDiffusionSamplingParams

        media = multi_modal_data(self.references)
        if self.guides:
            media["timeline_guides"] = [
                {"frame_index": index, reference_kind(path): str(path)}
                for index, path in self.guides
            ]
        sampling = OmniDiffusionSamplingParams(
            seed=self.seed,
            num_outputs_per_prompt=self.outputs,
            num_inference_steps=self.steps,
            height=self.height,
            width=self.width,
            extra_args={
                "task": self.task,
                "duration": self.duration,
                # upstream requires it for T2VA (the canvas is the explicit width x height)
                **({"aspect_ratio": "16:9"} if self.task == "t2va" else {}),
                **(
                    {
                        "long_video_mode": "continuation",
                        "continuation_window_frames": 107,
                        "continuation_overlap_frames": 22,
                    }
                    if self.continuation
                    else {}
                ),
            },
        )
        prompt = {"prompt": self.prompt, "multi_modal_data": media}
        return SimpleNamespace(prompts=[prompt], sampling_params=sampling)


def multi_modal_data(references: Sequence[Path]) -> dict[str, Any]:
    """`multi_modal_data` as upstream's `prepare_encoder_inputs` reads it for Ref2VA: the keys
    `image`, `video`, `audio`, each one path or a list of them."""
    grouped: dict[str, list[str]] = {}
    for path in references:
        grouped.setdefault(reference_kind(path), []).append(str(path))
    return {kind: paths if len(paths) > 1 else paths[0] for kind, paths in grouped.items()}


def request_of_kind(kind: str, request: H3Request) -> H3Request:
    """`request` (its references, seed, canvas, ...) made a request of `kind` (`KINDS`):

    - `ref2va`: as it is (the references condition the output);
    - `t2va`: no references (a text-only request);
    - `fl2va`: the references are the keyframes (one or two images: first, or first and last);
    - `continuation`: Ref2VA in continuation windows of 107 frames overlapping by 22 (a
      duration over 4.5 s gives two windows or more);
    - `guided`: Ref2VA with the first image reference also a still timeline guide at frame 0
      (vllm-omni 0.32.0rc1 on).
    """
    if kind == "ref2va":
        return request
    if kind == "t2va":
        return replace(request, task="t2va", references=())
    if kind == "fl2va":
        return replace(request, task="fl2va")
    if kind == "continuation":
        return replace(request, continuation=True)
    if kind == "guided":
        images = [path for path in request.references if reference_kind(path) == "image"]
        if not images:
            raise ValueError("a guided request needs an image reference for its guide")
        return replace(request, guides=((0, images[0]),))
    raise ValueError(f"unknown request kind {kind!r}: expected one of {', '.join(KINDS)}")
