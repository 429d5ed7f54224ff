"""Checkpoints: bit-exact round trip and clear mismatch errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from prenoise.ref2va import CheckpointError, ModelConfig, Ref2VAModels


def test_round_trip_is_bit_exact(tiny_models: Ref2VAModels, tmp_path: Path) -> None:
    tiny_models.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "config.json").is_file()
    loaded = Ref2VAModels.from_checkpoint(tmp_path / "ckpt")
    assert loaded.config == tiny_models.config
    for name, module in tiny_models.modules().items():
        want, got = module.state_dict(), loaded.modules()[name].state_dict()
        assert want.keys() == got.keys()
        assert all(torch.equal(want[k], got[k]) for k in want), name
    t5 = loaded.text_encoder.t5
    assert t5.encoder.embed_tokens.weight is t5.shared.weight
    prompt = ["round trip"]
    assert torch.equal(loaded.text_encoder.encode(prompt), tiny_models.text_encoder.encode(prompt))


def test_config_mismatch_names_the_key(tiny_models: Ref2VAModels, tmp_path: Path) -> None:
    tiny_models.save(tmp_path)
    other = tiny_models.config.model_copy(
        update={"transformer": tiny_models.config.transformer.model_copy(update={"dim": 64})}
    )
    with pytest.raises(
        CheckpointError, match=re.escape("'transformer.dim': checkpoint has 32, expected 64")
    ):
        Ref2VAModels.from_checkpoint(tmp_path, config=other)


def test_missing_or_tampered_checkpoint(tiny_models: Ref2VAModels, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        Ref2VAModels.from_checkpoint(tmp_path / "nothing")
    tiny_models.save(tmp_path)
    (tmp_path / "audio_vae.safetensors").unlink()
    with pytest.raises(CheckpointError, match="audio_vae"):
        Ref2VAModels.from_checkpoint(tmp_path, config=tiny_models.config)


def test_default_config_round_trip() -> None:
    assert ModelConfig.model_validate(ModelConfig().model_dump(mode="json")) == ModelConfig()
