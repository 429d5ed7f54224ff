"""`prenoise vllm-omni-verify`: exit codes and the JSON schema."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from prenoise.cli import main
from prenoise.integrations.vllm_omni.request import observe_draws


def test_verify_writes_the_schema_and_exits_0(tmp_path: Path, image_ref: Path) -> None:
    out = tmp_path / "verify.json"
    argv = ["vllm-omni-verify", "--reference", str(image_ref), "--outputs", "2", "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["equal"] is True and report["rng_state_unchanged"] is True
    for name in ("initial_video_noise", "initial_audio_noise", "visual_condition_noise"):
        entry = report["fields"][name]
        assert entry["equal"] and len(entry["sha256"]) == 64 and entry["shape"]
        assert entry["sha256"] == entry["plugin_on_sha256"]
        assert report["arms"]["plugin_on"]["drawn_on"][name].startswith("prenoise-vllm-omni")
        assert report["arms"]["plugin_off"]["drawn_on"][name] == "MainThread"
    assert "denoise.cond_anchor" in report["fields"]
    assert set(report["geometry"]) == {
        "latent_t",
        "latent_h",
        "latent_w",
        "audio_t",
        "condition_shapes",
    }


def test_verify_exits_1_when_an_arm_differs(tmp_path: Path, image_ref: Path) -> None:
    def flip(name: str, seed: int, tensor: torch.Tensor) -> None:
        if name == "initial_audio_noise":
            tensor.view(torch.int32).view(-1)[0] ^= 1

    out = tmp_path / "verify.json"
    with observe_draws(flip):
        status = main(["vllm-omni-verify", "--reference", str(image_ref), "--json", str(out)])
    assert status == 1
    report = json.loads(out.read_text())
    assert report["equal"] is False
    assert report["fields"]["initial_audio_noise"]["differences"] == ["values"]


def test_verify_exits_2_on_a_missing_reference(tmp_path: Path) -> None:
    missing = tmp_path / "nope.png"
    argv = ["vllm-omni-verify", "--reference", str(missing), "--json", str(tmp_path / "v.json")]
    assert main(argv) == 2
    assert not (tmp_path / "v.json").exists()
