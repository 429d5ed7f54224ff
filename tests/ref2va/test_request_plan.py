"""One request, one plan (issue 39): geometry, budget, shapes and streams are resolved once, by
`plan_request`, into a frozen `Ref2VARequestPlan`, and every consumer receives that very object:
the pipeline's arms, `verify`, `bench`, the service's jobs and the torchrun ranks."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from prenoise.ref2va import ModelConfig, Recipe, Ref2VAModels, make_synthetic_reference
from prenoise.ref2va import geometry as geometry_module
from prenoise.ref2va import request_plan as request_plan_module
from prenoise.ref2va.bench import BenchConfig, run_bench
from prenoise.ref2va.config import load_recipe
from prenoise.ref2va.media import write_image
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.references import ensure_reference
from prenoise.ref2va.request_plan import Ref2VARequestPlan, plan_request
from prenoise.ref2va.verification import verify_recipe
from prenoise.ref2va.video_processor import VideoProcessor

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "trace_prepare_files.py"
TINY = Path(__file__).with_name("tiny-recipe.yaml")

PLAN_FILES = (
    "ref2va/request_plan.py",
    "ref2va/request_budget.py",
    "ref2va/model_size.py",
    "ref2va/initialization.py",
    "ref2va/config.py",
)
"""Where a request's geometry, budget and streams are worked out: preparing a planned request
must enter none of them."""

RETURNS_BOUND = 420
"""File-visit returns of the tiny request, every call counted (`trace_prepare_files`), planned
and prepared in the overlapped arm with the model-size count cached: 393 measured with the plan,
480 before it (when `prepare` re-checked the request and re-derived its geometry, shapes and
streams piecemeal). Most of the rest is the media layer, entered again for every decoded frame."""


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plan-refs")
    image = root / "ref.png"
    write_image(image, (torch.arange(64 * 96 * 3).reshape(64, 96, 3) % 251).to(torch.uint8))
    return {"video": make_synthetic_reference(root / "ref.mp4", 0.5, 96, 64), "image": image}


def _recipe(config: ModelConfig, media: dict[str, Path], **kw: Any) -> Recipe:
    data: dict[str, Any] = {
        "prompt": "one plan",
        "references": [
            {"kind": "video", "path": str(media["video"])},
            {"kind": "image", "path": str(media["image"])},
        ],
        "frames": 22,
        "width": 128,
        "height": 64,
        "steps": 1,
        "model": config.model_dump(),
        **kw,
    }
    return Recipe.model_validate(data)


@pytest.fixture(scope="module")
def pipe(tiny_models: Ref2VAModels) -> Ref2VAPipeline:
    return Ref2VAPipeline(tiny_models)


def test_the_plan_is_frozen_and_holds_every_output_stream(
    tiny_config: ModelConfig, media: dict[str, Path]
) -> None:
    plan = plan_request(_recipe(tiny_config, media, outputs=3, noise_stream="libm"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.geometry = plan.geometry  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.outputs[0].seed = 0  # type: ignore[misc]
    assert all(isinstance(v, tuple) for v in (plan.headers, plan.condition_shapes, plan.outputs))
    assert plan.references_checked and len(plan.headers) == 2
    assert plan.condition_shapes == ((7, 4, 8), (1, 4, 8))  # the video's 12 frames, the image
    assert [d.seed for d in plan.outputs] == [plan.recipe.seed + i for i in range(3)]
    for draws in plan.outputs:
        streams = (draws.video, draws.audio, *draws.conditions)
        assert {s.noise_stream for s in streams} == {"libm"}
        assert draws.condition_shapes == plan.condition_shapes
    first = plan.outputs[0]
    assert first.for_conditions([(7, 4, 8), (1, 4, 8)]) is first  # the prediction held
    moved = first.for_conditions([(8, 4, 8), (1, 4, 8)])  # it did not: rebuilt from `moved`
    assert moved.conditions[0].draws[0].keep == (1, 24, 8) and moved.video is first.video


METHODS = ("prepare", "prepare_next", "draw_output_noise", "denoise", "decode_and_write")
"""Every `Ref2VAPipeline` method that takes the plan."""


class Received:
    """Which plan objects each pipeline method received."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.plans: Counter[tuple[str, int]] = Counter()
        for name in METHODS:
            real = getattr(Ref2VAPipeline, name)
            monkeypatch.setattr(Ref2VAPipeline, name, self._spy(name, real))

    def _spy(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def spy(pipeline: Ref2VAPipeline, plan: Ref2VARequestPlan, *args: Any, **kw: Any) -> Any:
            assert isinstance(plan, Ref2VARequestPlan)
            self.plans[(name, id(plan))] += 1
            return real(pipeline, plan, *args, **kw)

        return spy

    def only(self, plan: Ref2VARequestPlan) -> dict[str, int]:
        """Calls per method, asserting every one received `plan` itself."""
        assert {ident for _, ident in self.plans} == {id(plan)}, self.plans
        return {name: count for (name, _), count in self.plans.items()}


def test_verify_and_bench_hand_every_arm_the_one_plan(
    pipe: Ref2VAPipeline,
    tiny_config: ModelConfig,
    media: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = plan_request(_recipe(tiny_config, media, outputs=2))
    received = Received(monkeypatch)
    assert verify_recipe(pipe, plan).equal
    assert received.only(plan) == {"prepare": 2, "prepare_next": 2, "draw_output_noise": 2}
    received.plans.clear()
    run_bench(pipe, plan, BenchConfig(pairs=1, warmup=0, full=True))
    calls = received.only(plan)
    assert calls["prepare"] == 2 and calls["denoise"] == calls["decode_and_write"] == 4


@pytest.fixture()
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Calls of everything that resolves a request: geometry, budget, shapes, header reads."""
    calls: Counter[str] = Counter()

    def count(owner: Any, name: str) -> None:
        real = getattr(owner, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)

    count(Recipe, "geometry")
    count(Recipe, "size")
    count(Recipe, "num_frames")
    count(geometry_module, "frames_for_duration")
    count(request_plan_module, "estimate_request")
    count(request_plan_module, "model_nbytes")
    count(request_plan_module, "validate_references")
    count(VideoProcessor, "predict_latent_shape")
    real_from_frames = geometry_module.RequestGeometry.__dict__["from_frames"].__func__

    def from_frames(cls: Any, *args: Any) -> Any:
        calls["from_frames"] += 1
        return real_from_frames(cls, *args)

    monkeypatch.setattr(geometry_module.RequestGeometry, "from_frames", classmethod(from_frames))
    return calls


RESOLVED_ONCE = {
    "geometry": 1,
    "size": 1,
    "num_frames": 1,
    "from_frames": 1,
    "estimate_request": 2,  # the request alone, then with its references: one plan
    "model_nbytes": 1,
    "validate_references": 1,
    "predict_latent_shape": 2,  # the video and the image reference
}


@pytest.mark.parametrize("arm", ["serial", "overlapped"])
def test_a_whole_request_resolves_geometry_budget_and_shapes_once(
    pipe: Ref2VAPipeline,
    tiny_config: ModelConfig,
    media: dict[str, Path],
    counted: Counter[str],
    tmp_path: Path,
    arm: str,
) -> None:
    recipe = _recipe(tiny_config, media, outputs=2)
    plan = plan_request(recipe)
    assert dict(counted) == RESOLVED_ONCE
    counted.clear()
    result = pipe.generate(plan, tmp_path / "out.mp4", arm)  # type: ignore[arg-type]
    assert len(result.paths) == 2
    assert dict(counted) == {}  # preparing, denoising and decoding resolve nothing again


def test_the_service_job_carries_its_plan_to_every_stage(
    pipe: Ref2VAPipeline,
    tiny_config: ModelConfig,
    media: dict[str, Path],
    counted: Counter[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    pytest.importorskip("fastapi")
    from prenoise.serve import schema
    from prenoise.serve.jobs import Job, JobState, JobStore
    from prenoise.serve.runner import prepare_job, run_outputs
    from prenoise.serve.schema import ServeLimits, build_plan, parse_request

    real_validate = schema.validate_references

    def validate(*args: Any) -> Any:  # the service validates with its own refusals
        counted["validate_references"] += 1
        return real_validate(*args)

    monkeypatch.setattr(schema, "validate_references", validate)
    base = _recipe(tiny_config, media)
    request = parse_request({"seed": 9, "outputs": 2})
    plan = build_plan(base, request, media_root=None, uploads=[], limits=ServeLimits())
    assert dict(counted) == RESOLVED_ONCE  # the service's limits read the plan's geometry
    counted.clear()
    received = Received(monkeypatch)
    store, job = JobStore(), Job(plan=plan)
    store.add(job)
    store.transition(job, JobState.PREPARING)
    prepared = prepare_job(pipe, job)
    run_outputs(pipe, store, job, prepared, tmp_path / "job.mp4")
    assert len(job.paths) == 2 and dict(counted) == {}
    assert received.only(plan) == {
        "prepare": 1,
        "prepare_next": 1,
        "draw_output_noise": 1,
        "denoise": 2,
        "decode_and_write": 2,
    }


@pytest.mark.parametrize("host_shared", [True, False])
def test_every_rank_prepares_from_the_broadcast_plan(
    tiny_models: Ref2VAModels,
    tiny_config: ModelConfig,
    media: dict[str, Path],
    counted: Counter[str],
    monkeypatch: pytest.MonkeyPatch,
    host_shared: bool,
) -> None:
    from one_rank import OneRankContext
    from prenoise.distributed.request import resolve_request
    from prenoise.distributed.runner import DistributedRef2VA
    from prenoise.ref2va.config import ParallelConfig

    request = resolve_request(_recipe(tiny_config, media, outputs=2))
    assert dict(counted) == RESOLVED_ONCE
    counted.clear()
    runner = DistributedRef2VA(OneRankContext(), tiny_models, ParallelConfig(timeout_s=30.0))
    received = Received(monkeypatch)
    prepared = runner.prepare(request, host_shared=host_shared)
    assert prepared.outputs[0].used_prepared_noise and dict(counted) == {}
    assert received.only(request.plan)["prepare"] == 1


def _trace_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trace_prepare_files", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("trace_prepare_files", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def tiny_request(workdir: Path) -> Iterator[tuple[Recipe, Ref2VAPipeline]]:
    recipe = load_recipe(workdir / "tiny.yaml")
    for spec in recipe.references:  # the synthetic reference, written untraced
        ensure_reference(spec)
    yield recipe, Ref2VAPipeline(Ref2VAModels.default(recipe.model))


def test_following_a_request_returns_to_few_files(
    tiny_request: tuple[Recipe, Ref2VAPipeline],
) -> None:
    """`scripts/trace_prepare_files.py`'s walk of the tiny request: preparing the plan never
    enters a file that resolves a request, and the walk stays under the bound measured."""
    trace = _trace_script()
    recipe, pipeline = tiny_request
    plan, planning = trace.trace_files(lambda: plan_request(recipe))
    _, preparing = trace.trace_files(lambda: pipeline.prepare(plan, "overlapped"))
    entered = set(preparing.every_call.sequence)
    assert not entered & set(PLAN_FILES), sorted(entered & set(PLAN_FILES))
    assert "ref2va/request_plan.py" in planning.every_call.sequence
    _, whole = trace.trace_files(lambda: pipeline.prepare(plan_request(recipe), "overlapped"))
    assert whole.every_call.returns <= RETURNS_BOUND, whole.every_call.per_file()
