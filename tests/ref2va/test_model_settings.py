"""Model settings and numbers are validated with the recipe, and the models count in the budget.

`audio_vae.sample_rate: 1e9` tried 12.8 GB, `transformer.dim: 1048576` 4 TB, a `num_heads` that
does not divide `dim` failed after the models were built, and finite but extreme shifts (1e308,
5e-324, 1e-30) became NaN found only by the MP4 encoder after the whole run. Each is refused up
front now (exit 2, one line), and `prenoise demo --encode-seconds inf` no longer hangs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli_refusals import refused
from prenoise.cli.commands import main
from prenoise.ref2va.config import SHIFT_MAX, SHIFT_MIN, load_recipe
from prenoise.ref2va.model_size import model_nbytes
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.request_budget import HEAP_MARGIN, RUNTIME_BYTES
from prenoise.ref2va.request_plan import plan_request

TINY = Path(__file__).with_name("tiny-recipe.yaml")


def _with_model(workdir: Path, **model: dict[str, object]) -> str:
    data = yaml.safe_load((workdir / "tiny.yaml").read_text())
    for part, values in model.items():
        data["model"][part] = {**data["model"].get(part, {}), **values}
    (workdir / "model.yaml").write_text(yaml.safe_dump(data))
    return "model.yaml"


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            {"audio_vae": {"sample_rate": 1_000_000_000}},
            "error: model.yaml: model.audio_vae.sample_rate: Input should be less than or equal "
            "to 192000",
        ),
        (
            {"audio_vae": {"sample_rate": 16020}},
            "error: model.yaml: model.audio_vae.sample_rate: must be a multiple of 40 Hz",
        ),
        (
            {"transformer": {"dim": 30, "num_heads": 4}},
            "error: model.yaml: model.transformer: dim 30 must be even and divisible by num_heads",
        ),
    ],
)
def test_model_settings_are_refused_with_the_recipe(
    workdir: Path, capsys: pytest.CaptureFixture[str], model: dict, message: str
) -> None:
    recipe = _with_model(workdir, **model)
    assert refused(capsys, ["generate", "--recipe", recipe]).startswith(message)


def test_a_model_too_big_for_memory_is_refused_by_the_budget(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = _with_model(workdir, transformer={"dim": 1_048_576, "num_heads": 2})
    line = refused(capsys, ["generate", "--recipe", recipe])
    assert line.startswith("error: this request (model ") and "TiB of weights" in line, line
    assert sorted(p.name for p in workdir.iterdir()) == ["model.yaml", "tiny.yaml"]


def test_the_model_count_is_what_the_built_models_hold(workdir: Path) -> None:
    recipe = load_recipe("tiny.yaml")
    models = Ref2VAModels.default(recipe.model)
    tensors = {
        id(t): t
        for module in (models.text_encoder, models.video_vae, models.audio_vae, models.transformer)
        for t in (*module.parameters(), *module.buffers())
    }
    assert model_nbytes(recipe.model) == sum(t.numel() * t.element_size() for t in tensors.values())
    estimate = plan_request(recipe, references=False).estimate
    assert estimate.model == model_nbytes(recipe.model)
    largest = max(estimate.noise + estimate.references, estimate.denoise, estimate.decode)
    assert estimate.peak == estimate.model + RUNTIME_BYTES + int(largest * HEAP_MARGIN)


@pytest.mark.parametrize("option", ["--shift-video", "--shift-audio"])
@pytest.mark.parametrize("value", ["1e308", "5e-324", "1e-30", "100.5", "0.009"])
def test_extreme_shifts_are_refused_up_front(
    workdir: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    line = refused(capsys, ["verify", "--recipe", "tiny.yaml", option, value])
    key = option[2:].replace("-", "_")
    bound = f"less than or equal to {SHIFT_MAX:g}" if float(value) > 1 else (
        f"greater than or equal to {SHIFT_MIN:g}"
    )  # fmt: skip
    assert line == f"error: {option} {float(value)}: {key}: Input should be {bound}", line


def test_the_shift_bounds_themselves_are_accepted(workdir: Path) -> None:
    for shift in (SHIFT_MIN, SHIFT_MAX):
        recipe = load_recipe("tiny.yaml", shift_video=shift, shift_audio=shift)
        assert (recipe.shift_video, recipe.shift_audio) == (shift, shift)


@pytest.mark.parametrize("value", ["inf", "1e308", "-1", "nan", "61"])
def test_demo_encode_seconds_is_a_finite_bounded_number(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--encode-seconds", value])
    assert stop.value.code == 2
    assert f"--encode-seconds: must be a number in [0, 60], got {value}" in capsys.readouterr().err


@pytest.mark.parametrize("value", [1e308, 5e-324, 1e-30])
def test_serve_refuses_extreme_shifts_with_422_on_the_field(workdir: Path, value: float) -> None:
    from prenoise.serve.schema import RequestRejected, ServeLimits, build_plan, parse_request

    base = load_recipe("tiny.yaml")
    for field in ("shift_video", "shift_audio"):
        request = parse_request({field: value})
        with pytest.raises(RequestRejected) as rejected:
            build_plan(base, request, media_root=None, uploads=[], limits=ServeLimits())
        assert rejected.value.field == field
