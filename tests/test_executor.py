from __future__ import annotations

import gc
import threading
import time
import traceback
import weakref
from functools import partial

import pytest
import torch

from bitwise import bitwise_equal, same_state
from overlap import OverlapRecorder
from prenoise.observe.tracing import Tracer
from prenoise.preparation.draws import Draw, Stream, run_draw, run_stream
from prenoise.preparation.executor import PreparationExecutor, PreparationStateError
from prenoise.preparation.prediction import MismatchPolicy, PredictionMismatchError
from prenoise.verify.rng_guard import GlobalRNGChangedError, global_rng_guard


class EncoderFailed(RuntimeError):
    pass


def draw_seeded(seed: int, n: int = 4096) -> torch.Tensor:
    return run_draw(Draw("x", (n,)), torch.Generator().manual_seed(seed))


def prep_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("prenoise-prep")]


@pytest.mark.parametrize("seed", [0, 42, 2101])
def test_results_equal_direct_calls(seed: int) -> None:
    stream = Stream("s", seed, (Draw("video", (1, 24, 3, 8, 8)), Draw("audio", (12, 32))))
    with global_rng_guard("the executor"), PreparationExecutor() as prep:
        handle = prep.submit("s", partial(run_stream, stream))
        got = prep.take(handle)
    expected = run_stream(stream)
    assert all(bitwise_equal(got[k], expected[k]) for k in expected)


def test_take_once_and_unknown_names() -> None:
    with PreparationExecutor() as prep:
        prep.submit("noise", partial(draw_seeded, 1))
        prep.take("noise")
        with pytest.raises(PreparationStateError, match="'noise' was already taken"):
            prep.take("noise")
        with pytest.raises(PreparationStateError, match="'other' was never submitted"):
            prep.take("other")
        with pytest.raises(PreparationStateError, match="already submitted"):
            prep.submit("noise", partial(draw_seeded, 1))
    with pytest.raises(PreparationStateError, match="outside"):
        prep.submit("late", partial(draw_seeded, 1))


def test_taken_tensor_is_released_once_the_caller_drops_it() -> None:
    with PreparationExecutor() as prep:
        prep.submit("noise", partial(draw_seeded, 1, 1 << 16))
        noise = prep.take("noise")
        ref = weakref.ref(noise)
        del noise
        gc.collect()
        assert ref() is None  # the executor kept no reference, even inside its context


def test_untaken_results_are_released_at_exit() -> None:
    refs: list[weakref.ref[torch.Tensor]] = []

    def work() -> torch.Tensor:
        t = draw_seeded(3)
        refs.append(weakref.ref(t))
        return t

    with PreparationExecutor() as prep:
        prep.submit("noise", work)
    gc.collect()
    assert len(refs) == 1 and refs[0]() is None


def test_worker_exception_reraises_at_take_with_its_traceback() -> None:
    def failing_draw() -> torch.Tensor:
        raise ValueError("bad shape in worker")

    with PreparationExecutor() as prep:
        prep.submit("noise", failing_draw)
        with pytest.raises(ValueError, match="bad shape in worker") as info:
            prep.take("noise")
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "failing_draw" in frames
    assert any("prepared job 'noise'" in n for n in getattr(info.value, "__notes__", []))


@pytest.mark.parametrize("fail_at", ["text", "media"])
def test_body_failure_cancels_pending_joins_running_and_reraises_original(fail_at: str) -> None:
    started = threading.Event()
    release = threading.Event()
    ran: list[str] = []

    def blocker() -> str:
        started.set()
        release.wait(timeout=10)
        time.sleep(0.05)  # still running when the body's exception reaches the executor
        ran.append("blocker")
        return "blocker"

    def pending_job(name: str) -> str:
        ran.append(name)
        return name

    def fail_and_release() -> None:
        release.set()  # the running job may finish only after the failure began
        raise EncoderFailed(f"{fail_at} encoder failed")

    with (
        pytest.raises(EncoderFailed, match=f"{fail_at} encoder failed") as info,
        PreparationExecutor() as prep,
    ):
        prep.submit("first", partial(pending_job, "first"))
        prep.submit("running", blocker)
        prep.submit("pending_video", partial(pending_job, "pending_video"))
        prep.submit("pending_audio", partial(pending_job, "pending_audio"))
        assert started.wait(timeout=10)
        if fail_at == "text":
            fail_and_release()
        assert prep.take("first") == "first"  # text stage done; the media stage fails
        fail_and_release()
    assert type(info.value) is EncoderFailed
    # the running job was joined (it finished), the pending ones never ran
    assert ran == ["first", "blocker"]
    assert not prep_threads()
    assert any("pending_video" in n for n in getattr(info.value, "__notes__", []))


def test_failing_running_job_never_masks_the_body_error() -> None:
    started = threading.Event()

    def failing_worker() -> None:
        started.set()
        raise KeyError("worker error")

    with pytest.raises(EncoderFailed), PreparationExecutor() as prep:
        prep.submit("noise", failing_worker)
        started.wait(timeout=10)
        raise EncoderFailed("encoder")


def test_no_thread_outlives_the_context() -> None:
    before = threading.active_count()
    with PreparationExecutor(workers=3) as prep:
        for i in range(6):
            prep.submit(f"n{i}", partial(draw_seeded, i))
        assert len(prep.threads) >= 1
    assert threading.active_count() == before
    assert not prep.threads


def test_jobs_on_one_generator_run_on_one_thread() -> None:
    g = torch.Generator().manual_seed(11)
    g_ref = torch.Generator().manual_seed(11)
    seen: list[str] = []

    def draw_on(gen: torch.Generator, n: int) -> torch.Tensor:
        seen.append(threading.current_thread().name)
        return torch.randn(n, generator=gen)

    with PreparationExecutor(workers=4) as prep:
        for i in range(6):
            prep.submit(f"d{i}", partial(draw_on, g, 32 + 16 * i), generators=[g])
        got = [prep.take(f"d{i}") for i in range(6)]
    expected = [torch.randn(32 + 16 * i, generator=g_ref) for i in range(6)]
    assert len(set(seen)) == 1
    assert all(bitwise_equal(a, b) for a, b in zip(got, expected, strict=True))
    assert same_state(g, g_ref)


def test_prediction_match_releases_result() -> None:
    with PreparationExecutor() as prep:
        prep.submit("cond", partial(draw_seeded, 2), predicted=(1, 48, 84))
        with pytest.raises(PreparationStateError, match="actual="):
            prep.take("cond")
        prep.submit("cond2", partial(draw_seeded, 2), predicted=(1, 48, 84))
        assert bitwise_equal(prep.take("cond2", actual=(1, 48, 84)), draw_seeded(2))


def test_prediction_mismatch_raise_names_both_keys() -> None:
    with PreparationExecutor() as prep:
        prep.submit("cond", partial(draw_seeded, 2), predicted=(1, 48, 84))
        with pytest.raises(PredictionMismatchError, match=r"\(1, 48, 84\).*\(2, 48, 84\)"):
            prep.take("cond", actual=(2, 48, 84))
    assert prep.prediction_events == []


def test_prediction_mismatch_fallback_rewinds_generator_and_recomputes() -> None:
    g, g_ref = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    serial = torch.randn(2, 64, generator=g_ref)  # what the serial path draws (actual shape)
    with PreparationExecutor() as prep:
        prep.submit(
            "cond", lambda: torch.randn(1, 64, generator=g), predicted=(1, 64), generators=[g]
        )
        got = prep.take(
            "cond",
            actual=(2, 64),
            policy=MismatchPolicy.FALLBACK,
            recompute=lambda: torch.randn(2, 64, generator=g),
        )
    assert bitwise_equal(got, serial)
    assert same_state(g, g_ref)
    assert [(e.name, e.predicted, e.actual) for e in prep.prediction_events] == [
        ("cond", (1, 64), (2, 64))
    ]


def test_rng_guard_catches_global_rng_use() -> None:
    with pytest.raises(GlobalRNGChangedError, match="cpu"), global_rng_guard("the block"):
        torch.randn(3)
    with pytest.raises(GlobalRNGChangedError), PreparationExecutor(check_global_rng=True) as prep:
        prep.submit("bad", lambda: torch.randn(16))  # global RNG on the worker
        prep.take("bad")
    with PreparationExecutor(check_global_rng=True) as prep:
        prep.submit("good", partial(draw_seeded, 1))
        prep.take("good")


def test_tracer_records_jobs_on_the_worker_and_waits_on_the_caller() -> None:
    tracer = Tracer()
    with PreparationExecutor(tracer=tracer) as prep:
        prep.submit("noise", partial(draw_seeded, 1))
        prep.take("noise")
    spans = {s.name: s for s in tracer.spans}
    assert spans["noise"].thread_name.startswith("prenoise-prep")
    assert spans["wait:noise"].thread_name == threading.current_thread().name
    assert spans["noise"].end_s >= spans["noise"].start_s


def test_cancel_pending() -> None:
    release = threading.Event()
    with PreparationExecutor() as prep:
        prep.submit("running", lambda: release.wait(10))
        prep.submit("later", partial(draw_seeded, 1))
        assert prep.cancel_pending() == ["later"]
        with pytest.raises(PreparationStateError, match="cancelled"):
            prep.take("later")
        release.set()
        assert prep.take("running") is True


def test_submitted_draws_run_on_the_worker_before_they_are_taken(overlap: OverlapRecorder) -> None:
    """Overlap asserted: each job ran on a worker lane, had started before `take` asked for it,
    and drew its tensor there; the request thread drew nothing."""
    streams = [Stream(f"s{i}", i, (Draw(f"d{i}", (2, 1024)),)) for i in range(3)]
    with PreparationExecutor(workers=2) as prep:
        handles = [prep.submit(s.name, partial(run_stream, s)) for s in streams]
        got = [prep.take(h) for h in handles]
    ran = overlap.assert_prepared_ahead("prenoise-prep", ["s0", "s1", "s2"])
    assert len({run.thread for run, _ in ran.values()}) == 2  # both lanes worked
    assert [overlap.draws_in(f"s{i}") for i in range(3)] == [["d0"], ["d1"], ["d2"]]
    assert overlap.draws_outside_jobs() == []
    for i, result in enumerate(got):
        expected = torch.randn(2, 1024, generator=torch.Generator().manual_seed(i))
        assert bitwise_equal(result[f"d{i}"], expected)
