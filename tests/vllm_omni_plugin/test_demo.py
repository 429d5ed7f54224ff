"""`prenoise demo vllm-omni`: `prenoise vllm-omni-verify` with its defaults, then the timing;
exit 1 when a draw prenoise prepared is broken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from prenoise.cli.commands import main
from prenoise.integrations.vllm_omni.request import observe_draws


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, dict | None]:
    out = tmp_path / "demo.json"
    status = main(["demo", "vllm-omni", "--json", str(out)])
    text = " ".join(capsys.readouterr().out.split())
    return status, text, json.loads(out.read_text()) if out.exists() else None


def test_demo_vllm_omni_is_the_verify_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, report = _run(tmp_path, capsys)
    assert status == 0, out
    assert "runs `prenoise vllm-omni-verify --seed 42 --json" in out
    assert report is not None and report["verified"] is True
    assert "verified: bitwise equal" in out
    assert "timing: both arms of MiniMax-H3's forward and the comparison" in out
    assert out.endswith(" s)")


def test_demo_vllm_omni_exits_1_when_a_prepared_draw_is_broken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def flip(name: str, seed: int, tensor: torch.Tensor) -> None:
        if name == "initial_audio_noise":
            tensor.view(torch.int32).view(-1)[0] ^= 1

    with observe_draws(flip):
        status, out, report = _run(tmp_path, capsys)
    assert status == 1, out
    assert report is not None and report["equal"] is False
    assert "timing:" in out
