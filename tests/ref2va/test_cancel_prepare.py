"""Cancelling a request's preparation stops its media decode and its draws at the next point."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prenoise.guards.cancel import Cancelled
from prenoise.ref2va import ModelConfig, Recipe, Ref2VAModels, make_synthetic_reference
from prenoise.ref2va.media import reading as media
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.request_plan import plan_request

FRAMES = 96  # a 4 s reference at 24 fps


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_synthetic_reference(tmp_path_factory.mktemp("long") / "long.mp4", 4.0, 64, 64)


@pytest.mark.parametrize("arm", ["serial", "overlapped"])
def test_cancel_stops_decoding_mid_reference(
    tiny_config: ModelConfig,
    tiny_models: Ref2VAModels,
    long_reference: Path,
    monkeypatch: pytest.MonkeyPatch,
    arm: str,
) -> None:
    cancel = threading.Event()
    pulled: list[int] = []
    real = media.iter_video_frames

    def cancelled_after_20(*args: Any, **kwargs: Any) -> Iterator[np.ndarray]:
        for frame in real(*args, **kwargs):
            pulled.append(1)
            if len(pulled) == 20:
                cancel.set()  # e.g. DELETE arrives while the reference decodes
            yield frame

    monkeypatch.setattr(media, "iter_video_frames", cancelled_after_20)
    recipe = Recipe.model_validate(
        {
            "prompt": "cancel me",
            "references": [{"kind": "video", "path": str(long_reference)}],
            "frames": 22,
            "width": 64,
            "height": 64,
            "steps": 1,
            "model": tiny_config.model_dump(),
        }
    )
    pipe = Ref2VAPipeline(tiny_models)
    plan = plan_request(recipe)
    with pytest.raises(Cancelled, match=r"long\.mp4: cancelled"):
        pipe.prepare(plan, arm, cancel=cancel)
    assert len(pulled) == 20 < FRAMES  # the decoder stopped at the next frame
    assert not [t for t in threading.enumerate() if t.name.startswith("ref2va-prep")]
    cancel.clear()
    pulled.clear()
    pipe.prepare(plan, arm, cancel=threading.Event())
    assert len(pulled) == FRAMES  # not set: the whole reference decodes
