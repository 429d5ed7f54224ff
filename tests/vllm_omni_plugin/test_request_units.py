"""`RequestPreparation` driven directly, with a stand-in pipeline and request (no `forward`).

The end-to-end tests run upstream's whole `MiniMaxH3Pipeline.forward`; these run the preparation
alone, in milliseconds, against upstream's own serial functions as the reference: its
`_initial_noise` (which reads no pipeline state) and `minimax_h3_imgvid_cond_noise_aug_rows`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from prenoise.integrations.vllm_omni import h3_seeds, h3_shapes, plugin, request, support
from prenoise.integrations.vllm_omni.request import (
    ConditionKey,
    DrawRecord,
    InitialNoiseKey,
    RequestPreparation,
    current_request,
    observe_draws,
)
from prenoise.integrations.vllm_omni.settings import PluginSettings
from prenoise.preparation.executor import PreparationStateError
from prenoise.preparation.mixing import mix_conditions
from prenoise.preparation.prediction import MismatchPolicy, PredictionMismatchError
from prenoise.ref2va.noise import condition_streams

SEED = 7
# a 64x96 canvas: latents 4x6; one 64x32 image reference: condition latents (1, 4, 2)
LATENT_T, HEIGHT, WIDTH, AUDIO_T = 2, 64, 96, 3
INITIAL = InitialNoiseKey(SEED, LATENT_T, HEIGHT // 16, WIDTH // 16, AUDIO_T)
CONDITION = ConditionKey(SEED, LATENT_T, ((1, 4, 2),))
FIELDS = ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")


def upstream() -> Any:
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3

    return pipeline_minimax_h3


def serial_initial(key: InitialNoiseKey) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's own `_initial_noise` (it reads no pipeline state)."""
    return plugin.original("_initial_noise")(  # type: ignore[no-any-return]
        None,
        seed=key.seed,
        latent_t=key.latent_t,
        latent_h=key.latent_h,
        latent_w=key.latent_w,
        audio_t=key.audio_t,
    )


def serial_condition(key: ConditionKey, clean: torch.Tensor, noise_aug: float) -> torch.Tensor:
    return plugin.original("minimax_h3_imgvid_cond_noise_aug_rows")(  # type: ignore[no-any-return]
        clean,
        condition_shapes=key.condition_shapes,
        target_latent_t=key.target_latent_t,
        imgvid_cond_num_frames=len(key.condition_shapes),
        seed=key.seed,
        noise_aug=noise_aug,
    )


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


def assert_bitwise(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.shape == expected.shape and actual.stride() == expected.stride()
    assert actual.dtype == expected.dtype == torch.float32
    assert torch.equal(bits(actual), bits(expected))


def rows(key: ConditionKey) -> int:
    return sum(t * (h // 2) * (w // 2) for t, h, w in key.condition_shapes)


def make_media(**changes: Any) -> SimpleNamespace:
    fields: dict[str, Any] = dict(
        task="ref2va",
        latent_t=LATENT_T,
        height=HEIGHT,
        width=WIDTH,
        audio_t=AUDIO_T,
        images=[np.zeros((64, 32, 3), dtype=np.uint8)],
        videos=[],
    )
    return SimpleNamespace(**(fields | changes))


def make_pipeline(**changes: Any) -> SimpleNamespace:
    fields: dict[str, Any] = dict(
        od_config=SimpleNamespace(step_execution=False), load_vae_encoder=True, video_vae=None
    )
    return SimpleNamespace(**(fields | changes))


def make_sampling(**changes: Any) -> SimpleNamespace:
    fields: dict[str, Any] = dict(seed=SEED, extra_args={}, num_outputs_per_prompt=1)
    return SimpleNamespace(**(fields | changes))


UPSTREAM_FIRST = False  # the legacy code (0.30/0.31): upstream draws nothing ahead


@pytest.fixture(autouse=True)
def legacy_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """prenoise's own logic, on the code of 0.30/0.31 whatever the venv has (the 0.32.0rc1 flow,
    where upstream draws a Ref2VA first output ahead itself: `test_upstream_ahead.py`)."""
    monkeypatch.setattr(support, "current", lambda: support.Support())


@pytest.fixture
def settings() -> PluginSettings:
    return PluginSettings()


@pytest.fixture
def state(settings: PluginSettings) -> Iterator[RequestPreparation]:
    with RequestPreparation(make_pipeline(), make_sampling(), settings) as prep:
        yield prep


def started(prep: RequestPreparation, **media: Any) -> RequestPreparation:
    prep.start(SimpleNamespace(media=make_media(**media)))
    return prep


# -- lifetime ---------------------------------------------------------------------------------


def test_current_request_is_the_open_preparation_and_nests() -> None:
    assert current_request() is None
    with RequestPreparation(make_pipeline(), make_sampling(), PluginSettings()) as outer:
        assert current_request() is outer
        with RequestPreparation(make_pipeline(), make_sampling(), PluginSettings()) as inner:
            assert current_request() is inner
        assert current_request() is outer
    assert current_request() is None


def test_exit_cancels_pending_draws_joins_workers_and_reraises(settings: PluginSettings) -> None:
    gate = threading.Event()
    prep = RequestPreparation(make_pipeline(), make_sampling(), settings)
    with pytest.raises(KeyError, match="encoder failed"), prep:
        prep.executor.submit("blocker", gate.wait)
        started(prep)
        assert prep.executor.pending == [
            "blocker",
            "initial_video_noise@7",
            "initial_audio_noise@7",
            "visual_condition_noise@7",
        ]
        gate.set()
        raise KeyError("encoder failed")
    assert prep.executor.threads == []
    assert prep._plans == {}
    assert current_request() is None


def test_the_encoders_error_propagates_even_with_the_rng_check_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The request's own exception reaches the exit, so the executor re-raises it unchanged; the
    global-RNG check (`PRENOISE_DEBUG_RNG=1`) is for normal exits only."""
    monkeypatch.setenv("PRENOISE_DEBUG_RNG", "1")
    error = KeyError("encoder failed")
    prep = RequestPreparation(make_pipeline(), make_sampling(), PluginSettings())
    with torch.random.fork_rng(devices=[]), pytest.raises(KeyError) as raised, prep:
        torch.randn(1)  # the request thread's own use of the global RNG
        raise error
    assert raised.value is error


def test_prediction_events_are_the_executors(state: RequestPreparation) -> None:
    assert state.prediction_events is state.executor.prediction_events


# -- eligibility ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("media", "sampling", "pipeline", "reason"),
    [
        ({"task": "x2va"}, {}, {}, "task 'x2va' (prepared ahead: ref2va, t2va, fl2va)"),
        ({"task": None}, {}, {}, "task None (prepared ahead: ref2va, t2va, fl2va)"),
        (
            {},
            {"extra_args": {"continuation_prompts": []}},
            {},
            "continuation prompts without continuation mode (upstream refuses them)",
        ),
        ({}, {}, {"load_vae_encoder": False}, "media conditioning comes from the encoder stage"),
    ],
)
def test_ineligible_requests_are_not_prepared_and_say_why(
    media: dict[str, Any],
    sampling: dict[str, Any],
    pipeline: dict[str, Any],
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="prenoise.vllm_omni")
    prep = RequestPreparation(
        make_pipeline(**pipeline), make_sampling(**sampling), PluginSettings()
    )
    with prep:
        started(prep, **media)
        assert prep.skipped == reason
        assert prep.executor.pending == []
        assert prep._first_seed is None
    assert caplog.messages == [
        f"prenoise: request (no id): noise not prepared ahead, upstream drew it ({reason})"
    ]


def test_a_missing_task_is_ineligible(state: RequestPreparation) -> None:
    media = make_media()
    del media.task
    state.start(SimpleNamespace(media=media))
    assert state.skipped == "task None (prepared ahead: ref2va, t2va, fl2va)"


def test_upstreams_continuation_rule_decides_with_the_requests_arguments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[Any, ...]] = []

    def resolve(extra: Any, *, task: str, step_execution: bool) -> Any:
        calls.append((extra, task, step_execution))
        return (107, 22)

    monkeypatch.setattr(upstream(), "resolve_continuation", resolve)
    extra = {"other": 1}
    pipeline = make_pipeline(od_config=SimpleNamespace(step_execution=1))
    with RequestPreparation(pipeline, make_sampling(extra_args=extra), PluginSettings()) as prep:
        started(prep, num_frames=192)  # windows [0, 107) and [85, 192)
        assert prep.skipped is None
        # the first window's draws: 107 frames -> latent_t 32; audio 107 * 5 / 3 -> 178
        assert prep._plans[SEED].initial == InitialNoiseKey(
            SEED, 32, HEIGHT // 16, WIDTH // 16, 178
        )
        assert [keys[0].latent_t for keys in prep._plans[SEED].windows] == [32, 32]
        assert prep._plans[SEED].windows[1][1].condition_shapes[-1] == (7, 4, 6)  # the guide
    assert calls == [(extra, "ref2va", True)]
    assert type(calls[0][2]) is bool


def test_defaults_for_what_the_pipeline_and_request_may_not_have(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No `extra_args`, no `step_execution`, no `load_vae_encoder`: eligible, step_execution
    False; no seed: upstream's 42."""
    calls: list[bool] = []
    real = upstream().resolve_continuation

    def resolve(extra: Any, *, task: str, step_execution: bool) -> Any:
        calls.append(step_execution)
        return real(extra, task=task, step_execution=step_execution)

    monkeypatch.setattr(upstream(), "resolve_continuation", resolve)
    pipeline = SimpleNamespace(od_config=SimpleNamespace(), video_vae=None)
    sampling = SimpleNamespace(seed=None, extra_args=None, num_outputs_per_prompt=None)
    with RequestPreparation(pipeline, sampling, PluginSettings()) as prep:
        started(prep)
        assert prep.skipped is None
        assert calls == [False]
        assert prep.executor.pending == [
            "initial_video_noise@42",
            "initial_audio_noise@42",
            "visual_condition_noise@42",
        ]


# -- what is prepared, and taking it ------------------------------------------------------------


def test_a_request_without_extra_args_or_a_seed_attribute_is_prepared_with_seed_42() -> None:
    sampling = SimpleNamespace(num_outputs_per_prompt=1)
    with RequestPreparation(make_pipeline(), sampling, PluginSettings()) as prep:
        started(prep)
        assert prep.skipped is None
        assert list(prep._plans) == [42]


def test_start_submits_the_first_outputs_three_draws(state: RequestPreparation) -> None:
    started(state)
    assert state.skipped is None
    assert state._first_seed == SEED
    assert state._num_outputs == 1
    assert state.executor.pending == [
        "initial_video_noise@7",
        "initial_audio_noise@7",
        "visual_condition_noise@7",
    ]
    plan = state._plans[SEED]
    assert (plan.initial, plan.condition) == (INITIAL, CONDITION)
    assert [type(v) for v in vars(plan.initial).values()] == [int] * 5


def test_prepared_initial_noise_is_upstreams_serial_draw(state: RequestPreparation) -> None:
    started(state)
    prepared = state.take_initial_noise(INITIAL)
    assert prepared is not None
    for actual, expected in zip(prepared, serial_initial(INITIAL), strict=True):
        assert_bitwise(actual, expected)
    assert state.executor.pending == ["visual_condition_noise@7"]
    assert state.take_initial_noise(INITIAL) is None  # taken once


def test_prepared_condition_noise_mixes_to_upstreams_rows(state: RequestPreparation) -> None:
    started(state)
    clean = torch.linspace(-3, 3, rows(CONDITION) * 96).reshape(-1, 96)
    noise = state.take_condition_noise(CONDITION)
    assert noise is not None
    for noise_aug in (0.0, 0.3, 0.999):
        mixed = request.mix_condition_rows(clean, noise, CONDITION.condition_shapes, noise_aug)
        assert_bitwise(mixed, serial_condition(CONDITION, clean, noise_aug))
    assert state.take_condition_noise(CONDITION) is None  # taken once


def test_draw_records_say_where_when_and_whether_used(state: RequestPreparation) -> None:
    started(state)
    before = time.perf_counter()
    state.take_initial_noise(INITIAL)
    state.take_condition_noise(ConditionKey(SEED, LATENT_T + 1, CONDITION.condition_shapes))
    after = time.perf_counter()
    assert sorted(state.records) == [
        "initial_audio_noise@7",
        "initial_video_noise@7",
        "visual_condition_noise@7",
    ]
    for name, record in state.records.items():
        assert record.name == name and record.seed == SEED
        assert record.thread.startswith("prenoise-vllm-omni")
        assert record.requested is not None and before <= record.requested <= after
        assert record.started <= record.finished
    assert state.records["initial_video_noise@7"].used
    assert state.records["initial_audio_noise@7"].used
    assert not state.records["visual_condition_noise@7"].used  # mismatched: serial ran


def test_a_record_defaults_to_not_requested_and_not_used() -> None:
    record = DrawRecord("a", 1, "t", 1.0, 2.0)
    assert (record.requested, record.used) == (None, False)


def test_observers_see_each_draw_once_by_field_name(state: RequestPreparation) -> None:
    seen: list[tuple[str, int, tuple[int, ...], str]] = []

    def observer(name: str, seed: int, tensor: torch.Tensor) -> None:
        seen.append((name, seed, tuple(tensor.shape), threading.current_thread().name))

    with observe_draws(observer):
        started(state)
        state.take_initial_noise(INITIAL)
        state.take_condition_noise(CONDITION)
    assert sorted(s[:3] for s in seen) == [
        ("initial_audio_noise", SEED, (2 * AUDIO_T, 32)),
        ("initial_video_noise", SEED, (LATENT_T * 2 * 3, 96)),
        ("visual_condition_noise", SEED, (rows(CONDITION), 96)),
    ]
    assert all(s[3].startswith("prenoise-vllm-omni") for s in seen)
    assert request._observers == []


@pytest.mark.parametrize(
    "key",
    [
        InitialNoiseKey(SEED, LATENT_T + 1, 4, 6, AUDIO_T),
        InitialNoiseKey(SEED, LATENT_T, 6, 4, AUDIO_T),
        InitialNoiseKey(SEED, LATENT_T, 4, 6, AUDIO_T + 1),
    ],
)
def test_a_missed_initial_prediction_runs_upstreams_serial_code(
    state: RequestPreparation, key: InitialNoiseKey
) -> None:
    started(state)
    assert state.take_initial_noise(key) is None
    assert [(e.name, e.predicted, e.actual) for e in state.prediction_events] == [
        ("initial_video_noise@7", INITIAL, key),
        ("initial_audio_noise@7", INITIAL, key),
    ]
    assert not state.records["initial_video_noise@7"].used


def test_another_seed_was_not_prepared(state: RequestPreparation) -> None:
    started(state)
    other = InitialNoiseKey(SEED + 1, *request._dims(INITIAL))
    assert state.take_initial_noise(other) is None
    assert state.take_condition_noise(ConditionKey(SEED + 1, LATENT_T, ((1, 4, 2),))) is None
    assert len(state.executor.pending) == 3 and state.prediction_events == []


def test_a_mismatch_raises_when_configured() -> None:
    settings = PluginSettings(on_mismatch=MismatchPolicy.RAISE)
    with RequestPreparation(make_pipeline(), make_sampling(), settings) as prep:
        started(prep)
        with pytest.raises(PredictionMismatchError, match="initial_video_noise@7"):
            prep.take_initial_noise(InitialNoiseKey(SEED, 9, 4, 6, AUDIO_T))


def test_a_partly_served_initial_take_runs_the_serial_code(
    state: RequestPreparation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both draws are taken (released); if either fell back, neither is used."""
    started(state)
    real = state.executor.take

    def audio_falls_back(name: str, **kwargs: Any) -> Any:
        result = real(name, **kwargs)
        return None if name.startswith("initial_audio") else result

    monkeypatch.setattr(state.executor, "take", audio_falls_back)
    assert state.take_initial_noise(INITIAL) is None
    assert state.executor.pending == ["visual_condition_noise@7"]


# -- without condition noise; discarding it ----------------------------------------------------


def test_without_predictable_conditions_only_the_initial_noise_is_prepared(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="prenoise.vllm_omni")
    video = np.zeros((5, 64, 64, 3), dtype=np.uint8)
    pipeline = make_pipeline(video_vae=SimpleNamespace())  # no upstream hooks
    with RequestPreparation(pipeline, make_sampling(), PluginSettings()) as prep:
        started(prep, videos=[video])
        assert prep.executor.pending == ["initial_video_noise@7", "initial_audio_noise@7"]
        assert prep._plans[SEED].condition is None
        assert prep.take_initial_noise(INITIAL) is not None
        assert prep._plans == {}  # the output is finished: nothing left for it
    assert caplog.messages[0] == "prenoise: the video VAE does not expose its alignment methods"
    assert caplog.messages[1].startswith(
        "prenoise: request (no id): noise prepared ahead, 2 of 2 draws taken, "
    )


def test_discarding_condition_noise_releases_it_now(state: RequestPreparation) -> None:
    started(state)
    state.take_initial_noise(INITIAL)
    state.discard_condition_noise(SEED + 1)  # not prepared: nothing happens
    assert state.executor.pending == ["visual_condition_noise@7"]
    state.discard_condition_noise(SEED)
    assert state.executor.pending == []
    assert state._plans == {}
    assert state.prediction_events == []  # a discard is not a mismatch
    state.discard_condition_noise(SEED)  # already gone: nothing happens
    assert state.take_condition_noise(CONDITION) is None


def test_discarding_after_the_condition_was_taken_does_nothing(state: RequestPreparation) -> None:
    started(state)
    state.take_condition_noise(CONDITION)
    state.discard_condition_noise(SEED)
    assert state.executor.pending == ["initial_video_noise@7", "initial_audio_noise@7"]


# -- the next output ----------------------------------------------------------------------------


def next_output_state(outputs: int, **settings: Any) -> RequestPreparation:
    sampling = make_sampling(num_outputs_per_prompt=outputs)
    return RequestPreparation(
        make_pipeline(), sampling, PluginSettings(prepare_next_output=True, **settings)
    )


def test_each_output_prepares_the_next_until_the_last() -> None:
    with next_output_state(3) as prep:
        started(prep)
        assert prep._num_outputs == 3
        for seed in (SEED, SEED + 1, SEED + 2):
            key = InitialNoiseKey(seed, *request._dims(INITIAL))
            prepared = prep.take_initial_noise(key)
            assert prepared is not None
            for actual, expected in zip(prepared, serial_initial(key), strict=True):
                assert_bitwise(actual, expected)
            condition = ConditionKey(seed, LATENT_T, CONDITION.condition_shapes)
            assert prep.take_condition_noise(condition) is not None
            following = [] if seed == SEED + 2 else [f"{n}@{seed + 1}" for n in FIELDS]
            assert prep.executor.pending == following
        assert prep.prediction_events == []


def test_the_next_output_waits_for_the_whole_current_one() -> None:
    with next_output_state(2) as prep:
        started(prep)
        prep.take_initial_noise(INITIAL)
        assert prep.executor.pending == ["visual_condition_noise@7"]  # condition not yet taken


def test_without_conditions_the_next_output_follows_the_initial_noise() -> None:
    pipeline = make_pipeline(video_vae=SimpleNamespace())
    sampling = make_sampling(num_outputs_per_prompt=2)
    settings = PluginSettings(prepare_next_output=True)
    video = np.zeros((5, 64, 64, 3), dtype=np.uint8)
    with RequestPreparation(pipeline, sampling, settings) as prep:
        started(prep, videos=[video])
        prep.take_initial_noise(INITIAL)
        assert prep.executor.pending == ["initial_video_noise@8", "initial_audio_noise@8"]
        assert prep._plans[SEED + 1].condition is None


@pytest.mark.parametrize("condition", ["missed", "discarded"])
def test_an_unconfirmed_condition_leaves_the_next_output_serial(condition: str) -> None:
    with next_output_state(2) as prep:
        started(prep)
        prep.take_initial_noise(INITIAL)
        if condition == "missed":
            prep.take_condition_noise(ConditionKey(SEED, LATENT_T, ((1, 4, 4),)))
        else:
            prep.discard_condition_noise(SEED)  # no confirmed shapes either
        assert prep.executor.pending == []


def test_the_next_output_uses_the_confirmed_condition_shapes() -> None:
    with next_output_state(2) as prep:
        started(prep)
        prep.take_initial_noise(INITIAL)
        prep.take_condition_noise(CONDITION)
        assert prep._plans[SEED + 1].condition == ConditionKey(
            SEED + 1, LATENT_T, CONDITION.condition_shapes
        )
        assert prep._plans[SEED + 1].initial == InitialNoiseKey(SEED + 1, *request._dims(INITIAL))


def test_next_output_off_prepares_only_the_first() -> None:
    sampling = make_sampling(num_outputs_per_prompt=2)
    with RequestPreparation(make_pipeline(), sampling, PluginSettings()) as prep:
        started(prep)
        prep.take_initial_noise(INITIAL)
        prep.take_condition_noise(CONDITION)
        assert prep.executor.pending == [] and prep._plans == {}


def test_an_output_already_planned_is_not_submitted_twice() -> None:
    with next_output_state(3) as prep:
        started(prep)
        prep._submit(InitialNoiseKey(SEED + 1, *request._dims(INITIAL)), None)
        prep.take_initial_noise(INITIAL)
        prep.take_condition_noise(CONDITION)  # would submit SEED + 1 again without the guard
        assert prep.executor.pending == ["initial_video_noise@8", "initial_audio_noise@8"]


def test_an_unstarted_request_prepares_no_next_output() -> None:
    """`_first_seed` unset (the request was never started here): nothing is planned ahead."""
    with next_output_state(2) as prep:
        prep._submit(INITIAL, None)
        prep.take_initial_noise(INITIAL)
        assert prep.executor.pending == []


def test_an_invalid_output_count_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream rejects the request later with its own error; prenoise plans one output."""
    assert h3_seeds.num_outputs(make_sampling(num_outputs_per_prompt=11)) == 1
    assert h3_seeds.num_outputs(make_sampling(num_outputs_per_prompt=np.int64(4))) == 4
    assert type(h3_seeds.num_outputs(make_sampling(num_outputs_per_prompt=np.int64(4)))) is int
    monkeypatch.setattr(upstream(), "_resolve_minimax_h3_num_outputs", lambda value: 3.0)
    assert type(h3_seeds.num_outputs(make_sampling())) is int


# -- several ranks --------------------------------------------------------------------------------


class _Ranks:
    """`_dit_rank_world` and `broadcast_object_list` for one simulated rank."""

    def __init__(self, rank: int, world_size: int, sent: list[Any] | None = None) -> None:
        self.rank, self.world_size, self.sent = rank, world_size, sent
        self.group = object()
        self.world_calls = 0
        self.broadcasts: list[tuple[list[Any], int, object]] = []

    def world(self) -> tuple[object, int, int]:
        self.world_calls += 1
        return self.group, self.rank, self.world_size

    def broadcast(self, payload: list[Any], src: int, group: object) -> None:
        self.broadcasts.append((list(payload), src, group))
        if self.rank != 0:
            payload[:] = self.sent if self.sent is not None else [None]


@pytest.fixture
def ranks(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(rank: int, world_size: int, sent: list[Any] | None = None) -> _Ranks:
        fake = _Ranks(rank, world_size, sent)
        monkeypatch.setattr(upstream(), "_dit_rank_world", fake.world)
        monkeypatch.setattr(torch.distributed, "broadcast_object_list", fake.broadcast)
        return fake

    return install


def test_one_rank_broadcasts_nothing(state: RequestPreparation, ranks: Any) -> None:
    fake = ranks(0, 1)
    started(state)
    state.share_plan()
    state.share_plan()
    assert (fake.world_calls, fake.broadcasts) == (1, [])


def test_rank_zero_broadcasts_its_first_output_plan_once(ranks: Any) -> None:
    fake = ranks(0, 2)
    with next_output_state(2) as prep:
        started(prep)
        prep.share_plan()
        prep.share_plan()
    assert fake.broadcasts == [([(INITIAL, CONDITION, 2, UPSTREAM_FIRST, ())], 0, fake.group)]


def test_an_unprepared_rank_zero_broadcasts_none(state: RequestPreparation, ranks: Any) -> None:
    fake = ranks(0, 2)
    started(state, task="x2va")
    state.share_plan()
    assert fake.broadcasts == [([None], 0, fake.group)]


def test_another_rank_prepares_rank_zeros_plan(ranks: Any) -> None:
    fake = ranks(1, 2, sent=[(INITIAL, CONDITION, 3, False, ())])
    with next_output_state(1) as prep:  # this rank's own request says nothing
        prep.share_plan()
        assert fake.broadcasts == [([None], 0, fake.group)]
        assert prep._first_seed == SEED and prep._num_outputs == 3
        assert prep.executor.pending == [f"{n}@7" for n in FIELDS]
        prepared = prep.take_initial_noise(INITIAL)
        assert prepared is not None
        assert_bitwise(prepared[0], serial_initial(INITIAL)[0])
        prep.take_condition_noise(CONDITION)
        assert prep.executor.pending == [f"{n}@8" for n in FIELDS]


def test_another_rank_with_its_own_plan_or_no_payload_keeps_it(
    state: RequestPreparation, ranks: Any
) -> None:
    ranks(1, 2, sent=[(InitialNoiseKey(99, 1, 2, 2, 1), None, 1, False, ())])
    started(state)
    state.share_plan()
    assert list(state._plans) == [SEED]
    with RequestPreparation(make_pipeline(), make_sampling(), PluginSettings()) as other:
        ranks(1, 2, sent=None)
        other.share_plan()
        assert other._plans == {} and other._first_seed is None


# -- prediction and mixing --------------------------------------------------------------------


def test_image_conditions_are_predicted_as_integer_latents() -> None:
    media = make_media(images=[np.zeros((64, 32, 3)), np.zeros((48, 80, 3)), np.zeros((50, 40, 3))])
    shapes = request.predict_condition_shapes(make_pipeline(), media)
    assert shapes == ((1, 4, 2), (1, 3, 5), (1, 3, 2))
    assert shapes is not None and all(type(v) is int for s in shapes for v in s)


def test_video_conditions_use_the_video_vae(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, tuple[int, ...]]] = []
    vae = object()

    def predict(vae_: Any, frames_shape: tuple[int, ...]) -> tuple[int, int, int]:
        calls.append((vae_, frames_shape))
        return (3, 4, 6)

    monkeypatch.setattr(h3_shapes, "_predict_video_shape", predict)
    media = make_media(videos=[np.zeros((9, 64, 96, 3)), np.zeros((5, 32, 32, 3))])
    shapes = request.predict_condition_shapes(make_pipeline(video_vae=vae), media)
    assert shapes == ((1, 4, 2), (3, 4, 6), (3, 4, 6))
    assert calls == [(vae, (9, 64, 96, 3)), (vae, (5, 32, 32, 3))]
    assert all(type(d) is int for _, shape in calls for d in shape)


def test_mix_condition_rows_splits_per_condition() -> None:
    """Two conditions, two rounded coefficient products each: exactly `mix_conditions` on the
    per-condition blocks, and exactly upstream's serial rows."""
    key = ConditionKey(SEED, 2, ((1, 4, 2), (2, 2, 4)))
    noise = torch.randn(rows(key), 96, generator=torch.Generator().manual_seed(1))
    clean = torch.randn(rows(key), 96, generator=torch.Generator().manual_seed(2))
    mixed = request.mix_condition_rows(clean, noise, key.condition_shapes, 0.37)
    expected = mix_conditions([clean[:2], clean[2:]], noise, [0.37, 0.37])
    assert_bitwise(mixed, expected)
    drawn = request._concat_streams(
        condition_streams(SEED, 2, key.condition_shapes), threading.Event()
    )
    assert_bitwise(
        request.mix_condition_rows(clean, drawn, key.condition_shapes, 0.37),
        serial_condition(key, clean, 0.37),
    )


def test_one_stream_is_returned_uncopied(monkeypatch: pytest.MonkeyPatch) -> None:
    tensor = torch.zeros(2, 96)
    monkeypatch.setattr(request, "run_stream", lambda stream, cancel: {"x": tensor})
    assert request._concat_streams(["s"], threading.Event()) is tensor


def test_draws_stop_at_the_requests_cancel_event(
    state: RequestPreparation, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    real = request.run_stream

    def spy(stream: Any, *, cancel: Any) -> Any:
        seen.append(cancel)
        return real(stream, cancel=cancel)

    monkeypatch.setattr(request, "run_stream", spy)
    started(state)
    state.take_initial_noise(INITIAL)
    state.take_condition_noise(CONDITION)
    assert len(seen) == 3 and all(c is state.executor.cancel_event for c in seen)


def test_taking_after_the_request_ended_is_refused(settings: PluginSettings) -> None:
    with RequestPreparation(make_pipeline(), make_sampling(), settings) as prep:
        started(prep)
    assert prep.take_initial_noise(INITIAL) is None  # the plans went with the request
    with pytest.raises(PreparationStateError):
        prep.executor.take("initial_video_noise@7", actual=INITIAL)
