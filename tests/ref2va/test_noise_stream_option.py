"""The Ref2VA `noise_stream` recipe key, `--noise-stream` and the serve request field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from prenoise.cli.commands import main
from prenoise.noise.normal import randn
from prenoise.preparation.draws import run_stream
from prenoise.ref2va.config import RecipeError, load_recipe
from prenoise.ref2va.noise import initial_noise_streams
from prenoise.serve.schema import RequestRejected, _overrides, parse_request

TINY = Path(__file__).with_name("tiny-recipe.yaml")
LOCAL_X86 = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, tmp_path / "tiny.yaml")
    return tmp_path


def _verify(stream: str | None, name: str) -> dict[str, dict[str, str]]:
    extra = ["--noise-stream", stream] if stream else []
    assert main(["verify", "--recipe", "tiny.yaml", "--json", name, "--seed", "9", *extra]) == 0
    report = json.loads(Path(name).read_text())
    assert report["equal"] is True  # both arms drew the same stream
    return report["fields"]


def test_verify_compares_arms_of_the_chosen_stream(workdir: Path) -> None:
    native = _verify(None, "native.json")
    libm = _verify("libm", "libm.json")
    x86 = _verify("x86", "x86.json")
    key = "initial_video_noise"
    assert libm[key]["sha256"] != x86[key]["sha256"]
    local = x86 if LOCAL_X86 else libm
    assert native[key]["sha256"] == local[key]["sha256"]


def test_recipe_key_is_validated(workdir: Path) -> None:
    assert load_recipe("tiny.yaml").noise_stream == "native"
    assert load_recipe("tiny.yaml", noise_stream="x86").noise_stream == "x86"
    with pytest.raises(RecipeError, match="noise_stream"):
        load_recipe("tiny.yaml", noise_stream="arm")
    parallel = load_recipe("tiny.yaml", noise_stream="libm", parallel={"ranks": 2})
    assert parallel.noise_stream == "libm"  # multi-rank runs draw it too (tests/distributed)


def test_contract_streams_draw_in_the_stream() -> None:
    video, audio = initial_noise_streams(5, 2, 4, 4, 8, noise_stream="libm")
    got = run_stream(audio)["initial_audio_noise"]
    expected = randn((16, 32), generator=torch.Generator().manual_seed(5), stream="libm")
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))
    assert video.noise_stream == "libm"


def test_serve_request_field() -> None:
    assert _overrides(parse_request({"noise_stream": "x86"}))["noise_stream"] == "x86"
    assert "noise_stream" not in _overrides(parse_request({}))
    with pytest.raises(RequestRejected) as info:
        parse_request({"noise_stream": "arm"})
    assert info.value.field == "noise_stream"
