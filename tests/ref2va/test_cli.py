"""`prenoise generate` / `verify` end to end, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import av
import pytest

from prenoise.cli.commands import main
from prenoise.ref2va.media import synthetic_tone, write_wav

TINY = Path(__file__).with_name("tiny-recipe.yaml")


def test_verify_exit_zero_and_json(workdir: Path) -> None:
    assert main(["verify", "--recipe", "tiny.yaml", "--json", "v.json", "--seed", "2101"]) == 0
    report = json.loads((workdir / "v.json").read_text())
    assert report["equal"] is True and report["rng_state_unchanged"] is True
    for name in ("initial_video_noise", "initial_audio_noise", "visual_condition_noise"):
        field = report["fields"][name]
        assert field["equal"] and field["dtype"] == "torch.float32" and field["device"] == "cpu"
        assert len(field["sha256"]) == 64 and field["stride"][-1] == 1


def test_generate_writes_mp4_with_audio(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--recipe", "tiny.yaml", "--out", "clip.mp4", "--arm", "serial"]) == 0
    with av.open(str(workdir / "clip.mp4")) as container:
        assert len(container.streams.video) == 1 and len(container.streams.audio) == 1
    assert "clip.mp4" in capsys.readouterr().out


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    out = capsys.readouterr().out.strip()
    assert out.startswith("error:") and "Traceback" not in out
    return out


def test_missing_reference_is_one_line_error_and_no_output(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["generate", "--recipe", "tiny.yaml", "--reference", "nope.mp4", "--out", "o.mp4"])
    assert code == 2
    assert "nope.mp4: no such file" in _error(capsys)
    assert not (workdir / "o.mp4").exists()


def test_video_without_frames_is_rejected(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_wav(workdir / "silent.wav", synthetic_tone(0.5, 16000), 16000)
    (workdir / "silent.wav").rename(workdir / "silent.mp4")
    assert main(["verify", "--recipe", "tiny.yaml", "--reference", "silent.mp4"]) == 2
    assert "silent.mp4" in _error(capsys)


def test_unknown_recipe_key_names_key_and_file(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "bad.yaml").write_text((workdir / "tiny.yaml").read_text() + "\ndepth: 3\n")
    assert main(["verify", "--recipe", "bad.yaml"]) == 2
    message = _error(capsys)
    assert "bad.yaml" in message and "'depth'" in message


def test_negative_duration_is_rejected(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--recipe", "tiny.yaml", "--duration", "-1"]) == 2
    assert "duration" in _error(capsys)


def test_checkpoint_round_trip_and_mismatch(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from prenoise.ref2va import Ref2VAModels
    from prenoise.ref2va.config import load_recipe

    recipe = load_recipe(workdir / "tiny.yaml")
    Ref2VAModels.default(recipe.model).save(workdir / "ckpt")
    assert main(["verify", "--recipe", "tiny.yaml", "--checkpoint", "ckpt"]) == 0
    other = recipe.model.model_copy(update={"init_seed": 5})
    bigger = other.model_copy(
        update={"transformer": other.transformer.model_copy(update={"dim": 64})}
    )
    Ref2VAModels.default(bigger).save(workdir / "ckpt2")
    capsys.readouterr()
    assert main(["verify", "--recipe", "tiny.yaml", "--checkpoint", "ckpt2"]) == 2
    assert "ckpt2" in _error(capsys)
