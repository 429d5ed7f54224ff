"""`prenoise verify` (Ref2VA) says "not equal" and exits 1 when one arm is broken on purpose.

The overlapped arm is perturbed through a seam, never through a production flag: its draws run
on the `ref2va-prep` worker, so wrapping the pipeline's `run_stream` and changing only what a
worker thread returns breaks that arm alone; `prepare` is wrapped to change the overlapped arm's
mixed rows. Each case must make the verdict DIFFERENT (or the global RNG CHANGED) and exit 1,
and the positive case proves the overlap really happened (worker thread, started before asked).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from overlap import OverlapRecorder
from prenoise.cli.commands import main
from prenoise.ref2va import ModelConfig, Ref2VAModels
from prenoise.ref2va import pipeline as pipeline_module
from prenoise.ref2va.config import load_recipe
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.request_plan import plan_request
from prenoise.ref2va.verification import verify_recipe
from prenoise.verify import tensor_sha256

TINY = Path(__file__).with_name("tiny-recipe.yaml")
WORKER = "ref2va-prep"

Perturb = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]


def flip_one_bit(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` with the lowest bit of its first element flipped."""
    out = t.clone()
    out.view(-1).view(torch.int32)[0] ^= 1
    return out


def _on(name: str, change: Callable[[torch.Tensor], torch.Tensor]) -> Perturb:
    def perturb(result: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: change(v) if k == name else v for k, v in result.items()}

    return perturb


def _touch_global_rng(result: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    torch.rand(1)  # the values stay right; only the global RNG moves
    return result


# name -> (perturbation of the overlapped arm's draws, field expected to differ, difference)
DRAW_CASES: dict[str, tuple[Perturb, str | None, str | None]] = {
    "one_bit": (_on("initial_video_noise", flip_one_bit), "initial_video_noise", "values"),
    "stride": (
        _on("initial_audio_noise", lambda t: t.t().contiguous().t()),
        "initial_audio_noise",
        "stride",
    ),
    "dtype": (_on("initial_audio_noise", lambda t: t.double()), "initial_audio_noise", "dtype"),
    "shape": (
        _on("initial_audio_noise", lambda t: t.reshape(-1, 16)),
        "initial_audio_noise",
        "shape",
    ),
    "condition_bit": (
        _on("visual_condition_noise.0", flip_one_bit),
        "visual_condition_noise",
        "values",
    ),
    "global_rng": (_touch_global_rng, None, None),
}


def perturb_worker_draws(monkeypatch: pytest.MonkeyPatch, perturb: Perturb) -> list[str]:
    """Apply `perturb` to every `run_stream` result computed on a worker thread; returns the
    worker-thread names seen (so a test can prove the perturbed arm really ran there)."""
    real = pipeline_module.run_stream
    seen: list[str] = []

    def run_stream(*args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        result = real(*args, **kwargs)
        name = threading.current_thread().name
        if name.startswith(WORKER):
            seen.append(name)
            return perturb(result)
        return result

    monkeypatch.setattr(pipeline_module, "run_stream", run_stream)
    return seen


def perturb_overlapped_mix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flip one bit of the overlapped arm's mixed visual-condition rows."""
    real = Ref2VAPipeline.prepare

    def prepare(self: Ref2VAPipeline, plan: Any, arm: Any = "overlapped", **kw: Any) -> Any:
        conditioning, prepared, events = real(self, plan, arm, **kw)
        if arm == "overlapped":
            rows = prepared.inputs.condition_rows
            assert rows is not None
            prepared.inputs.condition_rows = flip_one_bit(rows)
        return conditioning, prepared, events

    monkeypatch.setattr(Ref2VAPipeline, "prepare", prepare)


@pytest.fixture(scope="module")
def tiny_pipeline(tiny_models: Ref2VAModels) -> Ref2VAPipeline:
    return Ref2VAPipeline(tiny_models)


@pytest.fixture()
def recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_config: ModelConfig) -> Any:
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, tmp_path / "tiny.yaml")
    loaded = load_recipe(tmp_path / "tiny.yaml")
    return loaded.model_copy(update={"model": tiny_config})


def test_unperturbed_verify_is_equal_and_really_overlapped(
    tiny_pipeline: Ref2VAPipeline, recipe: Any, overlap: OverlapRecorder
) -> None:
    result = verify_recipe(tiny_pipeline, plan_request(recipe))
    assert result.equal and result.rng_state_unchanged, result.summary()
    jobs = ["visual_condition_noise.0", "initial_video_noise", "initial_audio_noise"]
    ran = overlap.assert_prepared_ahead(WORKER, jobs)
    assert all(run.thread.startswith(WORKER) for run, _ in ran.values())
    for job in jobs:  # each prepared tensor was drawn inside its own job, on the worker
        assert overlap.draws_in(job) == [job]
    # the serial arm drew the same three tensors on the request thread, outside any job
    serial = overlap.draws_outside_jobs()
    assert [d.name for d in serial] == [
        "initial_video_noise",
        "initial_audio_noise",
        "visual_condition_noise.0",
    ]
    assert {d.thread for d in serial} == {threading.current_thread().name}
    # and both arms equal plain torch code, not just each other
    geo, seed = recipe.geometry(), recipe.output_seed(0)
    audio = torch.randn(2 * geo.audio_t, 32, generator=torch.Generator().manual_seed(seed))
    full = torch.randn(1, 24, geo.T, geo.h, geo.w, generator=torch.Generator().manual_seed(seed))
    video = full.view(1, 24, geo.T, 1, geo.h // 2, 2, geo.w // 2, 2)
    video = video.permute(0, 2, 4, 6, 1, 3, 5, 7).reshape(-1, 96)
    fields = result.to_json()["fields"]
    assert fields["initial_audio_noise"]["sha256"] == tensor_sha256(audio)
    assert fields["initial_video_noise"]["sha256"] == tensor_sha256(video)


@pytest.mark.parametrize("case", list(DRAW_CASES))
def test_verify_reports_a_broken_overlapped_draw(
    tiny_pipeline: Ref2VAPipeline, recipe: Any, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    perturb, field, difference = DRAW_CASES[case]
    seen = perturb_worker_draws(monkeypatch, perturb)
    result = verify_recipe(tiny_pipeline, plan_request(recipe))
    assert len(seen) == 3  # the overlapped arm's three streams ran on the worker
    assert not result.equal, result.summary()
    assert result.used_prepared_noise
    if field is None:  # the global RNG: every field equal, the verdict still not equal
        assert not result.rng_state_unchanged
        assert all(f.equal for f in result.fields.values())
        assert result.summary().endswith("global RNG CHANGED")
    else:
        assert result.rng_state_unchanged
        assert difference in result.fields[field].differences, result.fields[field]
        assert "DIFFERENT" in result.summary() and field in result.summary()
        assert result.to_json()["fields"][field]["equal"] is False


def test_verify_reports_a_broken_overlapped_mix(
    tiny_pipeline: Ref2VAPipeline, recipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    perturb_overlapped_mix(monkeypatch)
    result = verify_recipe(tiny_pipeline, plan_request(recipe))
    assert not result.equal
    differing = [name for name, f in result.fields.items() if not f.equal]
    assert differing == ["denoise.condition_rows"]
    assert result.fields["denoise.condition_rows"].differences == ["values"]


def test_verify_compares_the_two_arms_not_one_arm_twice(
    tiny_pipeline: Ref2VAPipeline, recipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change confined to the serial arm is seen too (the request thread's draws)."""
    real = pipeline_module.run_stream

    def run_stream(*args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        result = real(*args, **kwargs)
        if threading.current_thread() is threading.main_thread():
            return _on("initial_video_noise", flip_one_bit)(result)
        return result

    monkeypatch.setattr(pipeline_module, "run_stream", run_stream)
    result = verify_recipe(tiny_pipeline, plan_request(recipe))
    assert not result.equal
    assert result.fields["initial_video_noise"].differences == ["values"]


@pytest.mark.parametrize("case", ["one_bit", "stride", "dtype", "shape", "global_rng", "mix"])
def test_cli_verify_exits_1_and_writes_not_equal(
    recipe: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    if case == "mix":
        perturb_overlapped_mix(monkeypatch)
    else:
        perturb_worker_draws(monkeypatch, DRAW_CASES[case][0])
    assert main(["verify", "--recipe", "tiny.yaml", "--json", "v.json"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    report = json.loads(Path("v.json").read_text())
    assert report["equal"] is False
    if case == "global_rng":
        assert report["rng_state_unchanged"] is False and "global RNG CHANGED" in out
        assert all(f["equal"] for f in report["fields"].values())
    else:
        assert report["rng_state_unchanged"] is True and "DIFFERENT" in out
        assert [k for k, f in report["fields"].items() if not f["equal"]]


def test_cli_verify_exits_0_when_unperturbed(recipe: Any) -> None:
    assert main(["verify", "--recipe", "tiny.yaml", "--json", "v.json"]) == 0
    assert json.loads(Path("v.json").read_text())["equal"] is True
