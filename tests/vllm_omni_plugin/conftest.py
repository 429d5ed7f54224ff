"""vLLM-Omni plugin tests: run in `.venv-vllm-omni` (`make pytest-vllm-omni`), skipped elsewhere."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip(
    "vllm_omni", reason="vllm-omni lives in .venv-vllm-omni (make pytest-vllm-omni)"
)

from prenoise.integrations.vllm_omni import plugin
from prenoise.integrations.vllm_omni.standins import synthetic_image, synthetic_video


@pytest.fixture(autouse=True)
def plugin_restored() -> Iterator[None]:
    """Every test leaves prenoise uninstalled, whatever it did."""
    yield
    plugin.uninstall()


@pytest.fixture(scope="session")
def image_ref(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_image(tmp_path_factory.mktemp("refs") / "reference.png")


@pytest.fixture(scope="session")
def video_ref(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2.5 s 320x256 H.264 reference with an AAC track (upstream needs ffmpeg for videos)."""
    if shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None:
        pytest.skip("ffmpeg/ffprobe not installed (make setup-vllm-omni installs them with apt)")
    return synthetic_video(tmp_path_factory.mktemp("refs") / "reference.mp4")
