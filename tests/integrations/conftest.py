"""Fixtures of the diffusers integration tests: tiny offline pipelines, built once per session."""

from __future__ import annotations

import importlib
import os
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


_FTFY_MODULES = (
    "diffusers.pipelines.wan.pipeline_wan_i2v",
    "diffusers.pipelines.wan.pipeline_wan_video2video",
    "diffusers.pipelines.wan.pipeline_wan_vace",
    "diffusers.pipelines.wan.pipeline_wan_animate",
    "diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2",
    "diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_i2v",
    "diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_diffusion_forcing",
    "diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_i2v",
    "diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_v2v",
)


@pytest.fixture(autouse=True)
def _ftfy_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """diffusers 0.42.1's Wan-family modules (image-, video-to-video, VACE, Animate, SkyReels-V2)
    call `ftfy` in `prompt_clean` without importing it when ftfy is not installed; an identity
    stub serves both arms of every comparison alike."""
    pytest.importorskip("diffusers")
    stub = types.SimpleNamespace(fix_text=lambda text: text)
    for name in _FTFY_MODULES:
        module = importlib.import_module(name)
        if not hasattr(module, "ftfy"):
            monkeypatch.setattr(module, "ftfy", stub, raising=False)
    yield


@pytest.fixture(autouse=True)
def _fresh_log_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the integration's warn-once / say-once messages afresh."""
    pytest.importorskip("diffusers")
    import prenoise.integrations.diffusers.report as report_module

    monkeypatch.setattr(report_module, "_logged", set())


_cache: dict[str, Any] = {}


@pytest.fixture(scope="session")
def tiny() -> Callable[[str], Any]:
    """`tiny(name)`: the tiny pipeline `name` of `diffusers_tiny.BUILDERS`, built once."""

    import diffusers_tiny

    for module in sorted(Path(__file__).parent.glob("tiny_*.py")):
        importlib.import_module(module.stem)  # each registers its builders and call arguments

    def get(name: str) -> Any:
        if name not in _cache:
            _cache[name] = diffusers_tiny.BUILDERS[name]()
        return _cache[name]

    return get


@pytest.fixture
def patched_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test that wraps a relied-on diffusers function to observe or simulate it (a
    recording wrapper, an encoder that raises): the live-code check, which rightly runs such a
    call plain (`digests.class_live_problem`), trusts what runs."""
    from prenoise.integrations.diffusers import digests

    monkeypatch.setattr(digests, "live_keys_problem", lambda keys: None)
