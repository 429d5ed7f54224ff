"""vLLM-Omni plugin tests: run in `.venv-vllm-omni` (`make pytest-vllm-omni`), skipped elsewhere."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "vllm_omni", reason="vllm-omni lives in .venv-vllm-omni (make pytest-vllm-omni)"
)

from prenoise.integrations.vllm_omni import plugin


@pytest.fixture(autouse=True)
def plugin_restored() -> Iterator[None]:
    """Every test leaves prenoise uninstalled, whatever it did."""
    yield
    plugin.uninstall()


@pytest.fixture(scope="session")
def image_ref(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from PIL import Image

    pixels = (np.arange(384 * 512 * 3, dtype=np.int64) * 7919 % 251).astype(np.uint8)
    path = tmp_path_factory.mktemp("refs") / "reference.png"
    Image.fromarray(pixels.reshape(384, 512, 3)).save(path)
    return path


@pytest.fixture(scope="session")
def video_ref(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2.5 s 320x256 H.264 reference with an AAC track (upstream needs ffmpeg for videos)."""
    if shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None:
        pytest.skip("ffmpeg/ffprobe not installed (make setup-vllm-omni installs them with apt)")
    path = tmp_path_factory.mktemp("refs") / "reference.mp4"
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-y",
         "-f", "lavfi", "-i", "testsrc=size=320x256:rate=24:duration=2.5",
         "-f", "lavfi", "-i", "sine=frequency=440:duration=2.5:sample_rate=16000",
         "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(path)],
        check=True,
    )  # fmt: skip
    return path
