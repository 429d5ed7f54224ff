"""The Ref2VA arms: bitwise equality, ownership, failure handling and fall-back paths."""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import Any

import av
import pytest
import torch

from prenoise.observe.tracing import Category, Tracer
from prenoise.preparation.draws import run_stream
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.prediction import MismatchPolicy, PredictionMismatchError
from prenoise.ref2va import ModelConfig, Recipe, Ref2VAModels, make_synthetic_reference
from prenoise.ref2va import pipeline as pipeline_module
from prenoise.ref2va.conditioning import ExternalConditioning
from prenoise.ref2va.media import write_image
from prenoise.ref2va.noise import draw_condition_noise, initial_noise_streams
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.request_plan import plan_request
from prenoise.ref2va.verification import prepared_fields, verify_recipe
from prenoise.verify import compare
from prenoise.verify.rng_guard import global_rng_guard

SEEDS = (0, 42, 2101)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))
    )


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("refs")
    video = make_synthetic_reference(root / "ref.mp4", 0.75, 160, 96)
    image = root / "ref.png"
    gradient = torch.arange(96 * 144 * 3).reshape(96, 144, 3) % 251
    write_image(image, gradient.to(torch.uint8))
    return {"video": video, "image": image}


def make_recipe(
    config: ModelConfig, refs: list[tuple[str, Path]], *, seed: int = 42, **kw: Any
) -> Recipe:
    data: dict[str, Any] = {
        "prompt": "a test clip",
        "references": [{"kind": kind, "path": str(path)} for kind, path in refs],
        "frames": 22,
        "width": 128,
        "height": 64,
        "seed": seed,
        "steps": 2,
        "model": config.model_dump(),
    }
    data.update(kw)
    return Recipe.model_validate(data)


@pytest.fixture(scope="module")
def pipe(tiny_models: Ref2VAModels) -> Ref2VAPipeline:
    return Ref2VAPipeline(tiny_models)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [(2, 4, 6, 32), (7, 6, 10, 100), (37, 8, 12, 207)])
def test_background_initial_noise_equals_direct_sampling(
    seed: int, shape: tuple[int, int, int, int]
) -> None:
    t, h, w, audio_t = shape
    video, audio = initial_noise_streams(seed, t, h, w, audio_t)
    with global_rng_guard("background draws"), PreparationExecutor() as prep:
        v = prep.submit("v", lambda: run_stream(video))
        a = prep.submit("a", lambda: run_stream(audio))
        got_v, got_a = prep.take(v)[video.name], prep.take(a)[audio.name]
    direct = torch.randn(1, 24, t, h, w, generator=torch.Generator().manual_seed(seed))
    rows = direct.view(1, 24, t, 1, h // 2, 2, w // 2, 2).permute(0, 2, 4, 6, 1, 3, 5, 7)
    assert bits_equal(got_v, rows.reshape(-1, 96))
    direct_a = torch.randn(2 * audio_t, 32, generator=torch.Generator().manual_seed(seed))
    assert bits_equal(got_a, direct_a)
    for x in (got_v, got_a):
        assert x.device.type == "cpu" and x.dtype == torch.float32 and x.is_contiguous()


@pytest.mark.parametrize("refs", [["image"], ["video"], ["video", "image"]])
@pytest.mark.parametrize("seed", [0, 2101])
def test_prepared_noise_preserves_every_denoise_input(
    pipe: Ref2VAPipeline,
    tiny_config: ModelConfig,
    media: dict[str, Path],
    refs: list[str],
    seed: int,
) -> None:
    recipe = make_recipe(tiny_config, [(k, media[k]) for k in refs], seed=seed)
    result = verify_recipe(pipe, plan_request(recipe))
    assert result.equal, result.summary()
    assert result.rng_state_unchanged and result.used_prepared_noise
    assert {"initial_video_noise", "visual_condition_noise", "denoise.condition_rows"} <= set(
        result.fields
    )
    json_fields = result.to_json()["fields"]
    assert json_fields["initial_video_noise"]["dtype"] == "torch.float32"
    assert len(json_fields["initial_video_noise"]["sha256"]) == 64


def test_later_outputs_use_seed_plus_i_and_never_share_prepared_noise(
    pipe: Ref2VAPipeline, tiny_config: ModelConfig, media: dict[str, Path]
) -> None:
    recipe = make_recipe(tiny_config, [("video", media["video"])], outputs=2)
    plan = plan_request(recipe)
    result = verify_recipe(pipe, plan)
    assert result.equal, result.summary()
    conditioning, first, _ = pipe.prepare(plan, "overlapped", keep_noise=True)
    second = pipe.prepare_next(plan, conditioning, 1, keep_noise=True)
    assert first.used_prepared_noise and not second.used_prepared_noise
    assert second.seed == recipe.seed + 1
    assert first.noise is not None and second.noise is not None
    assert not bits_equal(first.noise.initial_video_noise, second.noise.initial_video_noise)
    noise_storages = {
        t.untyped_storage().data_ptr()
        for t in vars(first.noise).values()
        if isinstance(t, torch.Tensor)
    }
    shared = [conditioning.text, *conditioning.visual_latents, *conditioning.audio_latents]
    shared += [t for t in vars(second.inputs).values() if isinstance(t, torch.Tensor)]
    assert all(t.untyped_storage().data_ptr() not in noise_storages for t in shared)


def test_consumed_host_noise_is_released_before_denoising(
    pipe: Ref2VAPipeline,
    tiny_config: ModelConfig,
    media: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drawn: dict[str, weakref.ref[torch.Tensor]] = {}

    def recording_run_stream(stream: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        out = run_stream(stream, **kwargs)
        drawn.update({name: weakref.ref(t) for name, t in out.items()})
        return out

    monkeypatch.setattr(pipeline_module, "run_stream", recording_run_stream)
    plan = plan_request(
        make_recipe(tiny_config, [("video", media["video"]), ("image", media["image"])])
    )
    transformer = pipe.models.transformer
    alive_at_first_call: list[list[str]] = []
    original_forward = transformer.forward

    def spying_forward(*args: Any, **kwargs: Any) -> Any:
        if not alive_at_first_call:
            alive_at_first_call.append([n for n, ref in drawn.items() if ref() is not None])
        return original_forward(*args, **kwargs)

    alive_after_step: list[list[str]] = []
    monkeypatch.setattr(transformer, "forward", spying_forward)
    _, prepared, _ = pipe.prepare(plan, "overlapped")
    assert prepared.used_prepared_noise and prepared.noise is None
    pipe.denoise(
        plan,
        prepared,
        callback=lambda info: alive_after_step.append(
            [n for n, ref in drawn.items() if ref() is not None]
        ),
    )
    assert len(drawn) == 4
    # Condition noise (host-only) is dead before the first transformer call; on the CPU the
    # initial video/audio rows ARE the model's input, and die as soon as step 1 replaces them.
    assert sorted(alive_at_first_call[0]) == ["initial_audio_noise", "initial_video_noise"]
    assert alive_after_step[0] == []


class EncoderFailed(RuntimeError):
    pass


@pytest.mark.parametrize("stage", ["text", "media"])
def test_encoder_failure_cancels_pending_joins_running_and_reraises(
    pipe: Ref2VAPipeline,
    tiny_config: ModelConfig,
    media: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    stage: str,
) -> None:
    started, failing = threading.Event(), threading.Event()
    finished: list[str] = []
    ran: list[str] = []

    def blocking_run_stream(stream: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        ran.append(stream.name)
        try:
            if len(ran) == 1:
                started.set()
                failing.wait(timeout=10)  # still running when the encoder fails
            return run_stream(stream, **kwargs)  # drawn, or cancelled if the exit came first
        finally:
            finished.append(stream.name)

    def fail(*_args: Any, **_kwargs: Any) -> Any:
        assert started.wait(timeout=10)
        failing.set()
        raise EncoderFailed(f"{stage} encoder failed")

    monkeypatch.setattr(pipeline_module, "run_stream", blocking_run_stream)
    if stage == "text":
        monkeypatch.setattr(pipe.models.text_encoder, "encode_with_mask", fail)
    else:
        from prenoise.ref2va import conditioning

        monkeypatch.setattr(conditioning, "encode_reference", fail)
    plan = plan_request(make_recipe(tiny_config, [("video", media["video"])]))
    with pytest.raises(EncoderFailed, match=f"{stage} encoder failed"):
        pipe.prepare(plan, "overlapped")
    assert ran == ["visual_condition_noise.0"]  # the others were cancelled before they ran
    assert finished == ["visual_condition_noise.0"]  # the running one was joined (it ended)
    assert not [t for t in threading.enumerate() if t.name.startswith("ref2va-prep")]


def test_condition_noise_recipe() -> None:
    shapes = [(1, 4, 6), (3, 4, 6)]
    a = draw_condition_noise(42, 5, shapes)
    b = draw_condition_noise(43, 5, shapes)
    assert a is not None and b is not None
    assert a.dtype == torch.float32 and a.is_contiguous()
    assert a.shape == (1 * 2 * 3 + 3 * 2 * 3, 96)
    assert a.untyped_storage().nbytes() == a.numel() * 4  # owns exactly its rows
    assert not bits_equal(a, b)
    g = torch.Generator().manual_seed(42)  # first condition: full_t = max(5 + 2, 1) = 7
    first = torch.randn(1, 24, 7, 4, 6, generator=g)[:, :, :1]
    rows = first.reshape(1, 24, 1, 1, 2, 2, 3, 2).permute(0, 2, 4, 6, 1, 3, 5, 7)
    assert bits_equal(a[:6], rows.reshape(6, 96))


def test_continuation_and_external_conditioning_keep_the_serial_path(
    pipe: Ref2VAPipeline, tiny_config: ModelConfig, media: dict[str, Path]
) -> None:
    plan = plan_request(make_recipe(tiny_config, [("image", media["image"])]))
    previous = torch.randn(1, 24, 2, 4, 8, generator=torch.Generator().manual_seed(1))
    outs = {}
    for arm in ("serial", "overlapped"):
        tracer = Tracer()
        _, prepared, _ = pipe.prepare(
            plan, arm, continuation=previous, keep_noise=True, tracer=tracer
        )
        assert not prepared.used_prepared_noise
        assert not [s for s in tracer.spans if s.category == Category.PREPARE]
        outs[arm] = prepared
    assert compare(prepared_fields([outs["serial"]]), prepared_fields([outs["overlapped"]])).equal

    conditioning, serial, _ = pipe.prepare(plan, "serial", keep_noise=True)
    external = ExternalConditioning(
        conditioning.text,
        conditioning.text_mask,
        conditioning.visual_latents,
        conditioning.audio_latents,
    )
    _, adopted, _ = pipe.prepare(plan, "overlapped", external=external, keep_noise=True)
    assert not adopted.used_prepared_noise
    assert compare(prepared_fields([serial]), prepared_fields([adopted])).equal
    # conditioning from elsewhere needs no reference checked: a size-only plan takes it
    size_only = plan_request(plan.recipe, references=False)
    assert not size_only.references_checked and size_only.condition_shapes == ()
    _, sized, _ = pipe.prepare(size_only, "serial", external=external, keep_noise=True)
    assert compare(prepared_fields([serial]), prepared_fields([sized])).equal
    with pytest.raises(ValueError, match="did not check its references"):
        pipe.prepare(size_only, "serial")  # but it cannot encode the unchecked references


def test_prediction_mismatch_is_caught_before_consumption(
    tiny_models: Ref2VAModels,
    tiny_config: ModelConfig,
    media: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prenoise.ref2va import request_plan

    real = request_plan.predict_reference_shape

    def wrong(*args: Any, **kwargs: Any) -> Any:
        shape = real(*args, **kwargs)
        return None if shape is None else (shape[0] + 1, shape[1], shape[2])

    monkeypatch.setattr(request_plan, "predict_reference_shape", wrong)
    plan = plan_request(make_recipe(tiny_config, [("video", media["video"])]))
    strict = Ref2VAPipeline(tiny_models, mismatch_policy=MismatchPolicy.RAISE)
    with pytest.raises(PredictionMismatchError, match=r"visual_condition_noise\.0"):
        strict.prepare(plan, "overlapped")
    lenient = Ref2VAPipeline(tiny_models, mismatch_policy=MismatchPolicy.FALLBACK)
    _, serial, _ = lenient.prepare(plan, "serial", keep_noise=True)
    _, fallback, events = lenient.prepare(plan, "overlapped", keep_noise=True)
    assert [e.name for e in events] == ["visual_condition_noise.0"]
    assert compare(prepared_fields([serial]), prepared_fields([fallback])).equal


def test_prediction_reuses_the_validated_header(
    pipe: Ref2VAPipeline,
    tiny_config: ModelConfig,
    media: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plan predicts from the header its validation read, and the overlapped arm takes that
    prediction: the file is probed once per request, and preparing predicts nothing again."""
    from prenoise.ref2va import conditioning as conditioning_module
    from prenoise.ref2va import media as media_module

    probed: list[str] = []
    real = media_module.probe_video

    def counting(path: Any, *args: Any) -> Any:
        probed.append(str(path))
        return real(path, *args)

    monkeypatch.setattr(media_module, "probe_video", counting)
    monkeypatch.setattr(conditioning_module, "probe_video", counting)
    plan = plan_request(make_recipe(tiny_config, [("video", media["video"])]))
    tracer = Tracer()
    conditioning, prepared, events = pipe.prepare(plan, "overlapped", tracer=tracer)
    assert prepared.used_prepared_noise and events == []
    assert probed == [str(media["video"])]
    assert list(plan.condition_shapes) == conditioning.visual_shapes
    assert not [s for s in tracer.spans if s.name.startswith("predict")]


def test_generate_writes_playable_mp4_with_video_and_audio(
    pipe: Ref2VAPipeline, tiny_config: ModelConfig, media: dict[str, Path], tmp_path: Path
) -> None:
    recipe = make_recipe(tiny_config, [("video", media["video"])])
    stages: list[str] = []
    result = pipe.generate(plan_request(recipe), tmp_path / "out.mp4", on_stage=stages.append)
    (path,) = result.paths
    with av.open(str(path)) as container:
        assert len(container.streams.video) == 1 and len(container.streams.audio) == 1
        frames = sum(1 for _ in container.decode(video=0))
    assert frames == recipe.geometry().frames
    assert stages[0] == "prepare" and "denoise output 0" in stages
    assert [p.name for p in tmp_path.iterdir()] == ["out.mp4"]


def test_unknown_arm_is_rejected(pipe: Ref2VAPipeline, tiny_config: ModelConfig) -> None:
    with pytest.raises(ValueError, match="unknown arm"):
        pipe.prepare(plan_request(make_recipe(tiny_config, [])), "sideways")  # type: ignore[arg-type]


def test_preparing_the_next_output_during_denoise_changes_no_byte(
    pipe: Ref2VAPipeline, tiny_config: ModelConfig, media: dict[str, Path], tmp_path: Path
) -> None:
    plan = plan_request(make_recipe(tiny_config, [("video", media["video"])], outputs=3))
    plain = pipe.generate(plan, tmp_path / "plain.mp4")
    tracer = Tracer()
    ahead = pipe.generate(plan, tmp_path / "ahead.mp4", tracer=tracer, prepare_next_output=True)
    assert [p.read_bytes() for p in plain.paths] == [p.read_bytes() for p in ahead.paths]
    worker_draws = [
        s for s in tracer.spans if s.name.startswith("draw:") and s.thread_name.startswith("ref2va")
    ]
    assert len(worker_draws) == 2 * 3  # outputs 1 and 2, three draws each, on the worker


def test_request_spans_cover_every_stage(
    pipe: Ref2VAPipeline, tiny_config: ModelConfig, media: dict[str, Path], tmp_path: Path
) -> None:
    recipe = make_recipe(tiny_config, [("video", media["video"]), ("image", media["image"])])
    tracer = Tracer()
    pipe.generate(plan_request(recipe), tmp_path / "out.mp4", tracer=tracer)
    names = {s.name.split(":")[0] for s in tracer.spans}
    assert {
        "prepare",
        "text_encode",
        "media_decode",
        "media_encode",
        "wait",
        "mix",
        "inputs",
        "first_transformer_call",
        "denoise",
        "decode",
    } <= names
    media_decodes = {s.name for s in tracer.spans if s.name.startswith("media_decode")}
    assert media_decodes == {"media_decode:video", "media_decode:audio", "media_decode:image"}
    (first,) = [s for s in tracer.spans if s.name == "first_transformer_call"]
    (denoise,) = [s for s in tracer.spans if s.name == "denoise"]
    assert denoise.start_s <= first.start_s <= first.end_s <= denoise.end_s
