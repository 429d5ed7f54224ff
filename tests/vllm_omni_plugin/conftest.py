"""vLLM-Omni plugin tests: run in `.venv-vllm-omni` (`make pytest-vllm-omni`), skipped elsewhere."""

from __future__ import annotations

import multiprocessing
import shutil
from collections.abc import Iterator
from multiprocessing.context import ForkServerContext
from pathlib import Path

import pytest

pytest.importorskip(
    "vllm_omni", reason="vllm-omni lives in .venv-vllm-omni (make pytest-vllm-omni)"
)

import forked
import scalar_host as scalar_host_module
from scalar_host import ScalarHost

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


@pytest.fixture(scope="session")
def vllm_forkserver() -> ForkServerContext:
    """Processes forked from one server that imported torch and vllm (`forked.py`): the three
    scratch-copy runs (test_release_support.py) and the two ranks (test_multirank.py) share
    that import instead of an interpreter each, as does the `scalar_host` process."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(forked.PRELOAD))
    return context


@pytest.fixture(scope="session")
def scalar_host(
    image_ref: Path, tmp_path_factory: pytest.TempPathFactory, vllm_forkserver: ForkServerContext
) -> ScalarHost:
    """Upstream's references where torch runs its scalar CPU kernels (`ATEN_CPU_CAPABILITY=
    default`: the libm stream's arithmetic), for test_noise_streams.py and
    test_pipeline_streams.py: one process forked from the `vllm_forkserver` computes both
    (`scalar_host.py`)."""
    return scalar_host_module.compute(image_ref, tmp_path_factory.mktemp("scalar"), vllm_forkserver)
