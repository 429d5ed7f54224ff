"""Every recipe key and request option reaches every execution path, or is refused there.

The class behind `torchrun … --noise-stream libm` writing native bytes: an option one path
silently ignores. Each execution path (single process, torchrun, serve, bench) runs from a
`Recipe`; these tests check the three places where a key can be lost:
1. an option → the recipe (`recipe_from_args` for generate, verify, bench and torchrun; serve's
   request fields → `_overrides`): every option changes its recipe key, none is dropped;
2. the recipe → the ranks: torchrun broadcasts the recipe as data and re-validates it; every key
   survives the round trip;
3. the recipe → the noise each path draws: the distributed preparation (both modes) equals the
   single-process one bit for bit for recipes that change every noise-relevant key.
A table names, per path, what each key does; a key added without a decision fails here.
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path
from typing import Any

import pytest

from one_rank import OneRankContext
from prenoise.distributed.request import resolve_request
from prenoise.distributed.runner import DistributedRef2VA
from prenoise.ref2va.cli_options import add_request_arguments, recipe_from_args
from prenoise.ref2va.config import ParallelConfig, Recipe, load_recipe, recipe_from_dict
from prenoise.ref2va.limits import limit_overrides
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.request_plan import plan_request
from prenoise.ref2va.verification import prepared_fields
from prenoise.serve.schema import VideoRequest, _overrides, parse_request
from prenoise.verify import compare, nest_dotted

TINY = Path(__file__).parent / "ref2va" / "tiny-recipe.yaml"
PATHS = ("single", "torchrun", "serve", "bench")
HONOURED = "honoured"
BASE = "from the service recipe"  # serve: set in the recipe `prenoise serve` loads, not per request

# What each path does with each recipe key. serve takes per-request fields for some keys and the
# rest from the service's own recipe (`prenoise serve --recipe`), which it honours as given.
_PER_REQUEST = (
    "prompt", "references", "duration", "frames", "width", "height", "seed", "noise_stream",
    "steps", "shift_video", "shift_audio", "outputs",
)  # fmt: skip
_FROM_BASE = (
    "name", "short_edge", "aspect", "orientation", "output_dir", "tau_visual", "tau_audio",
    "device", "model", "checkpoint", "parallel", "limits",
)  # fmt: skip
KEYS: dict[str, dict[str, str]] = {
    key: {
        "single": HONOURED,
        "torchrun": HONOURED,
        "serve": HONOURED if key in _PER_REQUEST else BASE,
        "bench": HONOURED,
    }
    for key in _PER_REQUEST + _FROM_BASE
}

# generate's request options and the recipe key each one sets, with a non-default value.
OPTIONS: dict[str, tuple[list[str], str]] = {
    "prompt": (["--prompt", "another prompt"], "prompt"),
    "reference": (["--reference", "other.png"], "references"),
    "seed": (["--seed", "7"], "seed"),
    "noise_stream": (["--noise-stream", "libm"], "noise_stream"),
    "duration": (["--duration", "0.4"], "duration"),
    "frames": (["--frames", "9"], "frames"),
    "width": (["--width", "64", "--height", "96"], "width"),
    "height": (["--width", "128", "--height", "64"], "height"),
    "steps": (["--steps", "3"], "steps"),
    "shift_video": (["--shift-video", "5.0"], "shift_video"),
    "shift_audio": (["--shift-audio", "2.0"], "shift_audio"),
    "outputs": (["--outputs", "2"], "outputs"),
    "device": (["--device", "cpu:0"], "device"),
    "checkpoint": (["--checkpoint", "ckpt"], "checkpoint"),
}


def test_every_recipe_key_has_a_decision_on_every_path() -> None:
    assert set(KEYS) == set(Recipe.model_fields)
    serve_fields = set(VideoRequest.model_fields) - {"size"}  # size: width+height in one
    per_request = {k for k, paths in KEYS.items() if paths["serve"] == HONOURED}
    assert per_request == serve_fields


def _request_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_request_arguments(parser)
    return parser


def _generate_args(*argv: str) -> argparse.Namespace:
    return _request_parser().parse_args(["--recipe", str(TINY), *argv])


def test_every_request_option_sets_its_recipe_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """generate, verify and bench share these options (`add_request_arguments`), and torchrun
    runs the same commands: each option must change the recipe, never be dropped."""
    monkeypatch.setattr("prenoise.ref2va.config.check_device", lambda device: None)
    options = {a.dest for a in _request_parser()._actions if a.option_strings}
    options -= {"help", "recipe"}
    limit_dests = set(limit_overrides(_request_parser().parse_args(["--recipe", "x"]))) | {
        dest for dest in options if dest.startswith("max_") or dest == "memory_budget"
    }
    assert options - limit_dests == set(OPTIONS)  # a new option needs a row in OPTIONS
    default = recipe_from_args(_generate_args())
    for dest, (argv, key) in OPTIONS.items():
        changed = recipe_from_args(_generate_args(*argv))
        assert getattr(changed, key) != getattr(default, key), (dest, key)
    assert limit_dests
    for dest in sorted(limit_dests):
        flag = next(a.option_strings[0] for a in _request_parser()._actions if a.dest == dest)
        changed = recipe_from_args(_generate_args(flag, "123456"))
        assert changed.limits != default.limits, dest


def test_serve_request_fields_set_their_recipe_keys() -> None:
    values: dict[str, Any] = {
        "prompt": "another prompt",
        "seed": 7,
        "noise_stream": "libm",
        "duration": 0.4,
        "frames": 9,
        "width": 64,
        "height": 96,
        "steps": 3,
        "shift_video": 5.0,
        "shift_audio": 2.0,
        "outputs": 2,
    }
    for field, value in values.items():
        body = {field: value}
        if field in ("width", "height"):
            body = {"width": 64, "height": 96}
        overrides = _overrides(parse_request(body))
        assert overrides.get(field) == body[field], field


def _every_key_changed() -> Recipe:
    base = load_recipe(TINY)
    data = base.model_dump(mode="json")
    data.update(
        name="every-key",
        prompt="another prompt",
        seed=2**64 - 2,
        noise_stream="libm",
        steps=3,
        shift_video=5.0,
        shift_audio=2.0,
        outputs=2,
        output_dir="elsewhere",
        tau_visual=0.5,
        frames=9,
        parallel={"ranks": 1, "host_shared_noise": False, "timeout_s": 12.0},
        limits={**data["limits"], "max_reference_frames": 999},
    )
    return recipe_from_dict(data, "test")


def test_torchrun_broadcast_keeps_every_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = _every_key_changed()
    resolved = pickle.loads(pickle.dumps(resolve_request(recipe)))  # as the broadcast sends it
    assert resolved.plan.recipe == recipe
    assert tuple(draws.seed for draws in resolved.plan.outputs) == (2**64 - 2, 2**64 - 1)


VARIANTS: dict[str, dict[str, Any]] = {
    "libm": {"noise_stream": "libm"},
    "x86": {"noise_stream": "x86"},
    "seeds": {"seed": 2**64 - 2, "outputs": 2},
    "tau": {"tau_visual": 0.25, "seed": 5},
    "length and size": {"frames": 30, "width": 160, "height": 96},
}


@pytest.mark.parametrize("host_shared", [True, False])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_distributed_preparation_equals_single_process(
    variant: str, host_shared: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    data = {**load_recipe(TINY).model_dump(mode="json"), **VARIANTS[variant]}
    recipe = recipe_from_dict(data, "test")
    models = Ref2VAModels.default(recipe.model)
    single, _ = Ref2VAPipeline(models).prepare_outputs(
        plan_request(recipe), "serial", keep_noise=True
    )
    runner = DistributedRef2VA(OneRankContext(), models, ParallelConfig(timeout_s=30.0))
    prepared = runner.prepare(resolve_request(recipe), keep_noise=True, host_shared=host_shared)
    report = compare(
        nest_dotted(prepared_fields(single)), nest_dotted(prepared_fields(prepared.outputs))
    )
    assert report.equal, report.summary()
