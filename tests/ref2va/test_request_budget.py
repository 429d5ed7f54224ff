"""A request is estimated and checked against the memory budget before any heavy work: once, when
it is planned (`plan_request`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from prenoise.cli.commands import main
from prenoise.guards.budget import BudgetExceededError
from prenoise.preparation.draws import NoisePlan
from prenoise.ref2va import cli_options
from prenoise.ref2va.config import load_recipe
from prenoise.ref2va.noise import condition_streams, initial_noise_streams
from prenoise.ref2va.request_plan import plan_request

TINY = Path(__file__).with_name("tiny-recipe.yaml")


def test_estimate_uses_the_noise_plan_and_the_references(workdir: Path) -> None:
    recipe = load_recipe(workdir / "tiny.yaml")
    alone = plan_request(recipe, references=False).estimate
    plan = plan_request(recipe)
    full = plan.estimate
    geo = plan.geometry  # 22 frames at 128x96: T=7, h=6, w=8
    video, audio = initial_noise_streams(recipe.seed, geo.T, geo.h, geo.w, geo.audio_t)
    assert (
        alone.noise
        == NoisePlan((video, audio)).peak_nbytes
        == 2 * 24 * 7 * 6 * 8 * 4 + 2 * 37 * 32 * 4
    )
    # the 0.5 s reference (12 frames -> latents (7, 6, 8)) adds its condition stream
    conds = condition_streams(recipe.seed, geo.T, [(7, 6, 8)])
    assert plan.condition_shapes == ((7, 6, 8),) and plan.outputs[0].conditions == conds
    assert full.noise == NoisePlan((video, audio, *conds)).peak_nbytes
    assert alone.references == 0 < full.references
    assert full.peak > alone.peak


def test_too_large_sizes_are_refused_before_any_file_is_opened(workdir: Path) -> None:
    for overrides in (
        {"width": 100_000, "height": 100_000},
        {"frames": 10**9, "duration": None},
        {"duration": 1e300, "frames": None},
    ):
        recipe = load_recipe(
            workdir / "tiny.yaml",
            references=[{"kind": "video", "path": "no-such-file.mp4"}],
            **overrides,
        )
        with pytest.raises(BudgetExceededError) as info:
            plan_request(recipe)
        message = str(info.value)
        assert message.startswith("this request (model ")
        assert "make the request smaller (width x height, now" in message
        assert "no-such-file" not in message  # the size, never the reference, is blamed
    width_only = load_recipe(workdir / "tiny.yaml", width=100_000, height=100_000)
    with pytest.raises(BudgetExceededError, match=r"now 100000x100000; duration/frames, now 22"):
        plan_request(width_only)


def test_memory_budget_from_the_recipe(workdir: Path) -> None:
    recipe = load_recipe(workdir / "tiny.yaml")
    alone = plan_request(recipe, references=False).estimate.peak
    assert plan_request(recipe.model_copy(update={"limits": _limits(recipe, 10**12)})).headers
    with pytest.raises(BudgetExceededError, match=r"more than the memory budget of 1\.0 KiB"):
        plan_request(load_recipe(workdir / "tiny.yaml", limits={"memory_budget": "1KiB"}))
    # enough for the request alone, not with its reference: the references are named
    with pytest.raises(BudgetExceededError, match=r"with its references .* shorten the references"):
        plan_request(recipe.model_copy(update={"limits": _limits(recipe, alone)}))


def _limits(recipe: Any, budget: int) -> Any:
    return recipe.limits.model_copy(update={"memory_budget": budget})


def test_cli_refuses_before_models_load(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_models(*_args: Any) -> Any:
        raise AssertionError("models were loaded")

    monkeypatch.setattr(cli_options, "load_models", no_models)
    for args in (
        ["generate", "--width", "100000", "--height", "100000", "--out", "o.mp4"],
        ["verify", "--frames", "1000000000"],
        ["bench", "--duration", "1e9"],
        ["verify", "--memory-budget", "1KiB"],
    ):
        assert main([*args, "--recipe", "tiny.yaml"]) == 2, args
        out = " ".join(capsys.readouterr().out.split())
        assert out.startswith("error: this request (model "), out
        assert "make the request smaller" in out and "--memory-budget" in out
    assert not (workdir / "o.mp4").exists()
