"""Shared fixtures for the Ref2VA tests: tiny models and a tiny synthetic reference video."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from prenoise.ref2va import ModelConfig, Ref2VAModels, make_synthetic_reference

TINY_RECIPE = Path(__file__).with_name("tiny-recipe.yaml")


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory holding the tiny recipe as `tiny.yaml`."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY_RECIPE, tmp_path / "tiny.yaml")
    return tmp_path


@pytest.fixture(scope="session")
def tiny_config() -> ModelConfig:
    """Very small model sizes."""
    return ModelConfig.model_validate(
        {
            "text": {"d_model": 32, "num_layers": 1, "num_heads": 2, "d_kv": 16, "d_ff": 64},
            "video_vae": {"hidden": 16},
            "audio_vae": {"hidden": 32},
            "transformer": {"dim": 32, "num_layers": 1, "num_heads": 2, "mlp_ratio": 2},
        }
    )


@pytest.fixture(scope="session")
def tiny_models(tiny_config: ModelConfig) -> Ref2VAModels:
    """Models built once per session (treat as read-only)."""
    return Ref2VAModels.default(tiny_config, seed=7)


@pytest.fixture(scope="session")
def synthetic_mp4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1 s 128x96 synthetic reference (H.264 + AAC)."""
    path = tmp_path_factory.mktemp("media") / "ref.mp4"
    return make_synthetic_reference(path, 1.0, 128, 96)
