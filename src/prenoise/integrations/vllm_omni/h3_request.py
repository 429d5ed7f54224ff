"""One Ref2VA request to the MiniMax-H3 pipeline, as `vllm-omni-verify` builds it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prenoise.integrations.vllm_omni.reference_kinds import reference_kind

__all__ = ["H3Request", "multi_modal_data"]


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
