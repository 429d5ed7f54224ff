"""Fast unit tests of the diffusers `randn_tensor` server and overlapped call, with fakes, no
pipelines (the core it serves through: tests/test_served_draws.py)."""

from __future__ import annotations

import itertools
import logging
import re
import sys
import threading
import types
from typing import Any

import pytest

pytest.importorskip("diffusers")

import diffusers
import diffusers.schedulers.scheduling_ddim as ddim
import torch
from diffusers import DiffusionPipeline
from diffusers.utils.torch_utils import randn_tensor

from bitwise import bitwise_equal, same_state
from prenoise.integrations.diffusers import call as call_module
from prenoise.integrations.diffusers import digests, draw_calls, registry
from prenoise.integrations.diffusers import plan as plan_module
from prenoise.integrations.diffusers import report as report_module
from prenoise.integrations.diffusers.patching import _dispatch, active_replay, replay_context
from prenoise.integrations.diffusers.plan import PlannedDraw, Unpredictable
from prenoise.integrations.diffusers.served_calls import RandnTensorServer
from prenoise.integrations.diffusers.streams import StreamTarget
from prenoise.noise import streams as noise_streams
from prenoise.preparation import served as served_module
from prenoise.preparation.draws import HalfDrawRule
from prenoise.preparation.executor import PreparationExecutor

LOGGER = "prenoise.integrations.diffusers"
DDIM = "diffusers.schedulers.scheduling_ddim"
F32 = torch.float32


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator("cpu").manual_seed(seed)


def exact(text: str) -> str:
    return f"^{re.escape(text)}$"


class Original:
    """A `randn_tensor` stand-in that records its calls and draws like diffusers'."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        try:
            return randn_tensor(*args, **kwargs)
        except Exception:
            return "refused"


class FakeExecutor:
    """Runs submitted work only when asked (`run`) or taken; records every call."""

    def __init__(self, fail: dict[str, BaseException] | None = None) -> None:
        self.work: dict[str, Any] = {}
        self.submitted: list[str] = []
        self.results: dict[str, Any] = {}
        self.taken: list[tuple[str, Any]] = []
        self.cancel_calls = 0
        self.fail = fail or {}

    def submit(self, name: str, work: Any) -> None:
        self.work[name] = work
        self.submitted.append(name)

    def run(self, name: str) -> None:
        self.results[name] = self.work.pop(name)()

    def take(self, name: str) -> Any:
        self.taken.append(name)
        if name in self.work:
            self.run(name)
        if name in self.fail:
            raise self.fail[name]
        return self.results.pop(name)

    def cancel_pending(self, names: Any = None) -> list[str]:
        self.cancel_calls += 1
        cancelled = [n for n in self.work if names is None or n in names]
        for n in cancelled:
            del self.work[n]
        return cancelled


def draws(*specs: tuple[str, tuple[int, ...], tuple[torch.Generator, ...]]) -> list[PlannedDraw]:
    return [PlannedDraw(label, shape, F32, gens) for label, shape, gens in specs]


def started(planned: list[PlannedDraw], **kw: Any) -> tuple[RandnTensorServer, FakeExecutor]:
    q, ex = RandnTensorServer(planned, **kw), FakeExecutor(kw.pop("fail", None))
    q.start(ex)  # type: ignore[arg-type]
    return q, ex


# -- queue: serving ------------------------------------------------------------------------------


def test_matching_calls_are_served_bitwise_in_plan_order() -> None:
    g, ref = gen(1), gen(1)
    q, ex = started(draws(("a", (2, 8), (g,)), ("b", (4, 4), (g,))))
    assert ex.submitted == ["0:a", "1:b"]
    orig = Original()
    ex.run("0:a")
    ex.run("1:b")
    a = q.serve(orig, ((2, 8),), {"generator": g, "dtype": F32})
    assert q.served == 1
    b = q.serve(orig, ((4, 4), g), {"device": "cpu"})
    assert q.served == 2 and orig.calls == []
    assert bitwise_equal(a, torch.randn((2, 8), generator=ref))
    assert bitwise_equal(b, torch.randn((4, 4), generator=ref))
    assert same_state(g, ref)
    assert ex.taken == ["0:a", "1:b"]
    extra = q.serve(orig, ((4, 4),), {"generator": g})  # all served: falls through
    assert len(orig.calls) == 1 and q.served == 2 and len(ex.taken) == 2
    assert bitwise_equal(extra, torch.randn((4, 4), generator=ref))
    assert q.finish() is None and q.mismatch is None
    assert [p.label for p in q.planned] == ["a", "b"] and isinstance(q.planned, tuple)
    # after finish every call falls through
    c = q.serve(orig, ((4, 4),), {"generator": g})
    assert len(orig.calls) == 2 and bitwise_equal(c, torch.randn((4, 4), generator=ref))


def test_positional_and_keyword_forms_torch_size_strided_and_devices() -> None:
    g, ref = gen(2), gen(2)
    q, _ = started(draws(*[(f"d{i}", (16,), (g,)) for i in range(5)]))
    orig = Original()
    outs = [
        q.serve(orig, (torch.Size([16]), [g], None, F32, torch.strided), {}),
        q.serve(orig, (), {"shape": (16,), "generator": g, "device": torch.device("cpu")}),
        q.serve(orig, ((16,),), {"generator": g, "device": "meta"}),
        q.serve(orig, ((16,),), {"generator": g, "layout": None}),
        q.serve(orig, ((16,), g), {"device": torch.device("meta")}),
    ]
    assert orig.calls == [] and q.served == 5
    assert [o.device.type for o in outs] == ["cpu", "cpu", "meta", "cpu", "meta"]
    for o in (outs[0], outs[1]):
        assert bitwise_equal(o, torch.randn((16,), generator=ref))
    torch.randn((16,), generator=ref)
    assert bitwise_equal(outs[3], torch.randn((16,), generator=ref))
    assert q.finish() is None


def test_generator_list_draws_rows_per_generator_like_randn_tensor() -> None:
    g1, g2, r1, r2 = gen(3), gen(4), gen(3), gen(4)
    g3, r3 = gen(5), gen(5)
    q, _ex = started(
        [
            PlannedDraw("rows", (2, 8), F32, (g1, g2)),
            PlannedDraw("same", (2, 8), F32, (g3, g3)),
            PlannedDraw("one", (1, 16), F32, (g1,)),
        ]
    )
    orig = Original()
    a = q.serve(orig, ((2, 8),), {"generator": [g1, g2], "dtype": F32})
    b = q.serve(orig, ((2, 8),), {"generator": [g3, g3]})
    c = q.serve(orig, ((1, 16),), {"generator": [g1]})
    assert orig.calls == [] and q.served == 3
    assert bitwise_equal(a, randn_tensor((2, 8), generator=[r1, r2]))
    assert bitwise_equal(b, randn_tensor((2, 8), generator=[r3, r3]))
    assert bitwise_equal(c, randn_tensor((1, 16), generator=[r1]))
    assert same_state(g1, r1) and same_state(g2, r2) and same_state(g3, r3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_half_and_double_draws_match_torch_randn(dtype: torch.dtype) -> None:
    g, ref = gen(6), gen(6)
    q, _ = started([PlannedDraw("h", (4, 8), dtype, (g,))])
    out = q.serve(Original(), ((4, 8),), {"generator": g, "dtype": dtype})
    assert bitwise_equal(out, torch.randn((4, 8), generator=ref, dtype=dtype))


def test_scalar_sized_draw_is_served() -> None:
    g, ref = gen(7), gen(7)
    q, _ = started(draws(("s", (2, 3), (g,))))
    out = q.serve(Original(), ((2, 3),), {"generator": g})
    assert q.served == 1 and bitwise_equal(out, torch.randn((2, 3), generator=ref))


def test_default_dtype_counts_as_the_call_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gen(8)
    q, _ = started([PlannedDraw("d", (16,), torch.float64, (g,))])
    monkeypatch.setattr(torch, "get_default_dtype", lambda: torch.float64)
    q.serve(Original(), ((16,),), {"generator": g})
    assert q.served == 1


def test_noise_stream_and_fallback() -> None:
    g, ref = gen(9), gen(9)
    fallback = Original()
    q, _ = started(draws(("x", (16,), (g,))), noise_stream="libm", fallback=fallback)
    orig = Original()
    out = q.serve(orig, ((16,),), {"generator": g})
    assert bitwise_equal(out, noise_streams.randn((16,), generator=ref, stream="libm"))
    q.serve(orig, ((16,),), {"generator": None})
    assert orig.calls == [] and fallback.calls == [(((16,),), {"generator": None})]


# -- queue: calls it does not serve ---------------------------------------------------------------


def test_calls_without_planned_generators_run_unchanged() -> None:
    g, other = gen(10), gen(11)
    q, ex = started(draws(("a", (16,), (g,))))
    orig = Original()
    q.serve(orig, ((16,),), {"generator": None})
    q.serve(orig, ((16,),), {"generator": other})
    q.serve(orig, ((16,),), {"generator": (g,)})  # a tuple is not a generator argument
    q.serve(orig, ((16,),), {"generator": "g"})
    assert len(orig.calls) == 4
    assert q.mismatch is None and q.served == 0 and ex.taken == []
    assert q.serve(orig, (), {"nonsense": 1}) == "refused"
    assert orig.calls[-1] == ((), {"nonsense": 1})
    too_many = ((16,), g, None, None, None, "sixth")
    assert q.serve(orig, too_many, {}) == "refused" and orig.calls[-1] == (too_many, {})
    q.serve(orig, ((16,),), {"generator": [other, g]})  # one planned generator: checked
    assert q.mismatch == (
        "expected a [16] torch.float32 on generator, the call drew [16] torch.float32 "
        "on 2 generator(s)"
    )


def test_no_plan_serves_nothing() -> None:
    g = gen(12)
    q, ex = started([])
    orig = Original()
    q.serve(orig, ((16,),), {"generator": g})
    assert len(orig.calls) == 1 and q.finish() is None and ex.cancel_calls == 0


@pytest.mark.parametrize(
    ("args", "kwargs", "problem"),
    [
        (((4, 4),), {}, "expected a [16] torch.float32 on generator, the call drew [4, 4] "
         "torch.float32 on 1 generator(s)"),
        (((16,),), {"dtype": torch.float64}, "expected a [16] torch.float32 on generator, the "
         "call drew [16] torch.float64 on 1 generator(s)"),
        (([16],), {}, "shape [16] is not a tuple"),
        (((16,),), {"layout": torch.sparse_coo}, "layout torch.sparse_coo"),
    ],
)  # fmt: skip
def test_mismatch_settles_and_falls_through(
    args: tuple[Any, ...], kwargs: dict[str, Any], problem: str
) -> None:
    g, ref = gen(13), gen(13)
    q, ex = started(draws(("a", (16,), (g,)), ("b", (16,), (g,))))
    ex.run("0:a")
    ex.run("1:b")
    orig = Original()
    call_kwargs = {"generator": g, **kwargs}
    out = q.serve(orig, args, call_kwargs)
    if problem.startswith("layout"):
        assert out == "refused"  # diffusers refuses the sparse layout too
    else:
        assert bitwise_equal(out, randn_tensor(*args, generator=ref, **kwargs))
    assert same_state(g, ref)
    assert q.mismatch == problem and q.served == 0
    assert ex.cancel_calls == 1 and ex.taken == ["0:a", "1:b"]
    assert len(orig.calls) == 1
    q.serve(orig, ((16,),), {"generator": g})  # a later matching call falls through too
    assert len(orig.calls) == 2 and q.served == 0 and len(ex.taken) == 2
    assert q.finish() == problem and ex.cancel_calls == 1


def test_device_none_with_a_non_cpu_default_device(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gen(14)
    q, _ = started(draws(("a", (16,), (g,)), ("b", (16,), (g,))))
    monkeypatch.setattr(torch, "get_default_device", lambda: torch.device("meta"))
    out = q.serve(Original(), ((16,),), {"generator": g, "device": "cpu"})
    assert q.served == 1 and out.device.type == "cpu"
    q.serve(lambda *a, **k: None, ((16,),), {"generator": g})
    assert q.mismatch == "device=None with default device meta"


def test_failed_prepared_draw_falls_through() -> None:
    g, ref = gen(15), gen(15)
    q, ex = started(draws(("a", (16,), (g,)), ("b", (16,), (g,))))
    ex.fail["0:a"] = RuntimeError("boom")
    orig = Original()
    out = q.serve(orig, ((16,),), {"generator": g})
    assert q.mismatch == "prepared draw 'a' failed: RuntimeError('boom')"
    assert q.served == 0 and len(orig.calls) == 1
    # 0:a ran (and failed) on the clone: the caller's generator was never moved by it
    assert bitwise_equal(out, torch.randn((16,), generator=ref)) and same_state(g, ref)


def test_failed_job_on_a_real_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    g, ref = gen(16), gen(16)
    real_run_draw = served_module.run_draw

    def run_draw(d: Any, gg: Any, **kw: Any) -> Any:
        out = real_run_draw(d, gg, **kw)
        if d.name == "b.0":
            raise ValueError("bad b")
        return out

    monkeypatch.setattr(served_module, "run_draw", run_draw)
    q = RandnTensorServer(draws(("a", (16,), (g,)), ("b", (16,), (g,)), ("c", (16,), (g,))))
    orig = Original()
    with PreparationExecutor() as ex:
        q.start(ex)
        a = q.serve(orig, ((16,),), {"generator": g})
        b = q.serve(orig, ((16,),), {"generator": g})
        c = q.serve(orig, ((16,),), {"generator": g})
        assert q.finish() == "prepared draw 'b' failed: ValueError('bad b')"
    assert q.served == 1 and len(orig.calls) == 2
    for t in (a, b, c):
        assert bitwise_equal(t, torch.randn((16,), generator=ref))
    assert same_state(g, ref)


# -- queue: ending the plan ----------------------------------------------------------------------


def test_finish_ends_the_plan_without_moving_any_generator(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Drawn on clones: what was not served never moved the caller's generators, so ending the
    plan joins/cancels the jobs and leaves each generator where the served draws left it."""
    g1, g2, g3, r1, r2, r3 = gen(20), gen(21), gen(22), gen(20), gen(21), gen(22)
    q, ex = started(
        draws(
            ("a", (16,), (g1,)),
            ("b", (16,), (g1,)),
            ("c", (16,), (g2,)),
            ("d", (16,), (g1,)),
            ("e", (16,), (g2,)),
            ("f", (16,), (g3,)),
        )
    )
    ex.fail["3:d"] = RuntimeError("late")
    for job in ("0:a", "1:b", "2:c", "3:d", "4:e"):
        ex.run(job)
    orig = Original()
    q.serve(orig, ((16,),), {"generator": g1})
    torch.randn((16,), generator=r1)
    left = q.finish()
    assert left == "the call did not make the planned draw(s): b, c, d, e, f"
    assert ex.cancel_calls == 1
    assert ex.taken[1:] == ["1:b", "2:c", "3:d", "4:e"]  # joined; 5:f was cancelled
    assert "5:f" not in ex.results
    assert same_state(g1, r1) and same_state(g2, r2) and same_state(g3, r3)
    assert q.finish() == left and ex.cancel_calls == 1


def test_ending_joins_a_running_job(monkeypatch: pytest.MonkeyPatch) -> None:
    g, ref = gen(23), gen(23)
    running, release = threading.Event(), threading.Event()
    real_run_draw = served_module.run_draw

    def run_draw(d: Any, gg: Any, **kw: Any) -> Any:
        if d.name == "b.0":
            running.set()
            release.wait()
        return real_run_draw(d, gg, **kw)

    monkeypatch.setattr(served_module, "run_draw", run_draw)
    q = RandnTensorServer(draws(("a", (16,), (g,)), ("b", (16,), (g,)), ("c", (16,), (g,))))
    with PreparationExecutor() as ex:
        q.start(ex)
        q.serve(Original(), ((16,),), {"generator": g})
        running.wait()
        threading.Timer(0, release.set).start()
        assert q.finish() == "the call did not make the planned draw(s): b, c"
        assert ex.pending == []
    torch.randn((16,), generator=ref)
    assert same_state(g, ref)


def test_all_pending_cancelled_leaves_generators_untouched() -> None:
    g, ref = gen(24), gen(24)
    gate = threading.Event()
    q = RandnTensorServer(draws(("a", (16,), (g,)), ("b", (16,), (g,))))
    orig = Original()
    with PreparationExecutor() as ex:
        ex.submit("gate", gate.wait)
        q.start(ex)
        q.serve(orig, ((4, 4),), {"generator": g})
        assert ex.pending == ["gate"]
        gate.set()
    assert q.served == 0 and len(orig.calls) == 1
    torch.randn((4, 4), generator=ref)
    assert same_state(g, ref)


def test_finish_before_start_and_after_everything_was_served() -> None:
    g = gen(25)
    q = RandnTensorServer(draws(("a", (16,), (g,))))
    assert q.finish() is None and q.served == 0  # never started: nothing was submitted
    q2, ex = started(draws(("a", (16,), (g,))))
    q2.serve(Original(), ((16,),), {"generator": g})
    q2.end("late")  # nothing remains: no executor call
    assert q2.mismatch == "late" and q2.finish() == "late" and ex.cancel_calls == 0
    assert ex.taken == ["0:a"]


def test_a_moved_generator_is_not_served(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator drawn from between the plan and the call (a wrapper, a reseed): the
    prepared draw is not served, the plain one is, from where the generator is."""
    for move in (lambda g: torch.randn(3, generator=g), lambda g: g.manual_seed(99)):
        g, ref = gen(27), gen(27)
        q, _ex = started(draws(("a", (16,), (g,)), ("b", (16,), (g,))))
        move(g)
        move(ref)
        orig = Original()
        out = q.serve(orig, ((16,),), {"generator": g})
        assert bitwise_equal(out, torch.randn((16,), generator=ref)) and same_state(g, ref)
        assert q.served == 0 and len(orig.calls) == 1
        assert q.mismatch == (
            "the generator moved since the draws were planned (before 'a'): something else "
            "drew from it"
        )


def test_wait_time_is_summed_over_served_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gen(26)
    q, _ = started(draws(("a", (16,), (g,)), ("b", (16,), (g,))))
    assert q.wait_s == 0.0 and q.mismatch is None
    ticks = iter([10.0, 10.5, 20.0, 21.25])
    monkeypatch.setattr(served_module.time, "perf_counter", lambda: next(ticks))
    q.serve(Original(), ((16,),), {"generator": g})
    q.serve(Original(), ((16,),), {"generator": g})
    assert q.wait_s == 1.75


def test_invalid_planned_draw_raises_on_construction() -> None:
    text = "draw 'i.0': dtype torch.int64 is not a floating dtype"
    with pytest.raises(ValueError, match=exact(text)):
        RandnTensorServer(
            [
                PlannedDraw("ok", (16,), F32, (gen(),)),
                PlannedDraw("i", (16,), torch.int64, (gen(),)),
            ]
        )


def test_planned_rows_and_draw_names() -> None:
    g1, g2 = gen(), gen()
    one = draw_calls.planned_rows(PlannedDraw("x", (2, 8), F32, (g1,)))
    two = draw_calls.planned_rows(PlannedDraw("y", (2, 8), torch.float16, (g1, g2)))
    assert [(d.name, d.shape, d.dtype) for d in one] == [("x.0", (2, 8), F32)]
    assert [(d.name, d.shape, d.dtype) for d in two] == [
        ("y.0", (1, 8), torch.float16),
        ("y.1", (1, 8), torch.float16),
    ]
    assert all(d.half_rule is HalfDrawRule.NATIVE for d in two)
    _q, ex = started([PlannedDraw("x", (2, 8), F32, (g1,)), PlannedDraw("z", (2,), F32, (g2,))])
    assert ex.submitted == ["0:x", "1:z"]


def test_helpers() -> None:
    g1, g2 = gen(), gen()
    assert draw_calls.unique_generators([g1, g2, g1]) == [g1, g2]
    assert draw_calls.generators_of(None) is None
    assert draw_calls.generators_of([g1, g2]) == (g1, g2)
    assert draw_calls.generators_of(g1) == (g1,)
    assert draw_calls.generators_of((g1,)) is None
    assert draw_calls.target_device("meta") == torch.device("meta")
    assert draw_calls.target_device(None) == torch.device("cpu")
    assert draw_calls.target_device(torch.device("meta")) == torch.device("meta")


# -- call: a fake pipeline -----------------------------------------------------------------------


CONTEXTS: list[Any] = []  # the replay target each FakePipe call ran under


class FakePipe(DiffusionPipeline):
    """Draws `shapes` through a diffusers module's `randn_tensor`; raises at draw `fail_at`."""

    noise_dtype = F32

    def __call__(  # type: ignore[override]
        self,
        prompt: str = "p",
        generator: Any = None,
        latents: Any = None,
        shapes: Any = ((2, 8), (16,)),
        fail_at: int | None = None,
        planned: Any = None,
    ) -> list[torch.Tensor]:
        CONTEXTS.append(active_replay())
        out = []
        for i, shape in enumerate(shapes):
            if i == fail_at:
                raise RuntimeError(f"failed at {i}")
            out.append(ddim.randn_tensor(shape, generator=generator, dtype=self.noise_dtype))
        return out


class Unplanned(FakePipe):
    pass


PATH = f"{FakePipe.__module__}.{FakePipe.__qualname__}"


def plan_fake(pipe: Any, values: Any, gens: tuple[torch.Generator, ...]) -> list[PlannedDraw]:
    planned = values["planned"] if values["planned"] is not None else values["shapes"]
    return [PlannedDraw(f"d{i}", s, F32, gens, DDIM) for i, s in enumerate(planned)]


@pytest.fixture
def pipe(monkeypatch: pytest.MonkeyPatch) -> FakePipe:
    monkeypatch.setitem(registry._PLANS, PATH, plan_fake)
    return FakePipe()


def plan_with(monkeypatch: pytest.MonkeyPatch, planner: Any) -> None:
    monkeypatch.setitem(registry._PLANS, PATH, planner)


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_overlapped_call_is_bitwise_the_plain_call(
    pipe: FakePipe, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    g, ref = gen(30), gen(30)
    plain = pipe(generator=ref)
    ticks = itertools.count(10)
    monkeypatch.setattr(call_module.time, "perf_counter", lambda: float(next(ticks)))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        out, report = call_module.overlapped_call_with_report(pipe, generator=g)
        call_module.overlapped_call_with_report(pipe, "q", g)
    assert all(bitwise_equal(a, b) for a, b in zip(out, plain, strict=True))
    torch.randn((2, 8), generator=ref)
    torch.randn((16,), generator=ref)
    assert same_state(g, ref)
    assert report == call_module.CallReport(
        "FakePipe", True, None, ("d0", "d1"), 2, None, 2.0, "native", 1.0, 1.0
    )
    assert warned(caplog) == [
        "prenoise: FakePipe: overlapped noise active (prepared draws: d0, d1)"
    ]
    assert report_module._logged == {("FakePipe", "active")}
    assert isinstance(CONTEXTS[-1], RandnTensorServer) and CONTEXTS[-1]._fallback is None
    assert active_replay() is None and ddim.randn_tensor is randn_tensor


def test_overlapped_call_returns_the_output(pipe: FakePipe) -> None:
    out = call_module.overlapped_call(pipe, "p", gen(31))
    assert bitwise_equal(out[0], torch.randn((2, 8), generator=gen(31)))
    g, ref = gen(31), gen(31)
    out = call_module.overlapped_call(pipe, generator=g, shapes=((4,),))  # keywords reach it
    assert len(out) == 1 and bitwise_equal(out[0], torch.randn((4,), generator=ref))
    assert same_state(g, ref)


def test_fewer_draws_than_planned(pipe: FakePipe, caplog: pytest.LogCaptureFixture) -> None:
    g, ref = gen(32), gen(32)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(2):
            out, report = call_module.overlapped_call_with_report(
                pipe, generator=g, shapes=((2, 8),), planned=((2, 8), (16,))
            )
    left = "the call did not make the planned draw(s): d1"
    assert report.overlapped and report.served == 1 and report.left_plan == left
    assert report.planned == ("d0", "d1")
    assert warned(caplog) == [
        "prenoise: FakePipe: overlapped noise active (prepared draws: d0, d1)",
        f"prenoise: FakePipe: 1 of 2 prepared draws served, the rest discarded ({left})",
    ]
    assert report_module._logged == {("FakePipe", "active"), ("FakePipe", "left-plan")}
    torch.randn((2, 8), generator=ref)
    assert bitwise_equal(out[0], torch.randn((2, 8), generator=ref))
    assert same_state(g, ref)


def test_a_raising_call_settles_and_reraises(pipe: FakePipe) -> None:
    g, ref = gen(33), gen(33)
    with pytest.raises(RuntimeError, match=exact("failed at 1")):
        call_module.overlapped_call_with_report(pipe, generator=g, fail_at=1)
    torch.randn((2, 8), generator=ref)
    assert same_state(g, ref)
    assert active_replay() is None and ddim.randn_tensor is randn_tensor


def plain_report(pipe: Any, caplog: pytest.LogCaptureFixture, *args: Any, **kwargs: Any) -> Any:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        out, report = call_module.overlapped_call_with_report(pipe, *args, **kwargs)
        call_module.overlapped_call_with_report(pipe, *args, **kwargs)
    assert not report.overlapped and report.served == 0 and report.planned == ()
    return out, report


def warning_for(reason: str, hint: str = "") -> str:
    return f"prenoise: FakePipe: noise not overlapped, plain call ({reason}){hint}"


def test_generator_none_runs_the_plain_call(pipe: FakePipe, caplog: Any) -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        ticks = itertools.count(10)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(call_module.time, "perf_counter", lambda: float(next(ticks)))
            out, report = plain_report(pipe, caplog, generator=None)
        torch.manual_seed(5)
        assert bitwise_equal(out[0], torch.randn((2, 8)))
    reason = "generator is None: noise comes from the device RNG"
    assert report == call_module.CallReport("FakePipe", False, reason, setup_s=1.0)
    assert CONTEXTS[-2:] == [None, None]  # the plain call runs outside any replay context
    hint = '; pass generator=torch.Generator("cpu").manual_seed(seed) to overlap it'
    assert warned(caplog) == [warning_for(reason, hint)]
    assert report_module._logged == {("FakePipe", "generator-none")}


DEFAULT_REASON = (
    "generator is torch's default cpu generator: other code on this thread (e.g. encoder "
    "dropout) draws from it too"
)
DEFAULT_HINT = (
    '; pass generator=torch.Generator("cpu").manual_seed(seed) instead to overlap it '
    "(torch.manual_seed(seed) returns the default CPU generator)"
)


@pytest.mark.parametrize("as_list", [False, True])
def test_the_default_generator_runs_the_plain_call(
    pipe: FakePipe, caplog: Any, as_list: bool
) -> None:
    with torch.random.fork_rng(devices=[]):
        seeded = torch.manual_seed(5)
        assert seeded is torch.default_generator
        out, report = plain_report(pipe, caplog, generator=[seeded] if as_list else seeded)
        torch.manual_seed(5)
        expected = torch.randn((2, 8))
    assert bitwise_equal(out[0], expected)  # drawn by the plain call, on the request thread
    assert report.reason == DEFAULT_REASON
    assert CONTEXTS[-2:] == [None, None]
    assert warned(caplog) == [warning_for(DEFAULT_REASON, DEFAULT_HINT)]
    assert report_module._logged == {("FakePipe", "generator-default")}


def test_a_list_with_the_default_generator_among_private_ones() -> None:
    private = gen(6)
    with pytest.raises(Unpredictable) as why:
        plan_module.call_generators([private, torch.default_generator, gen(7)])
    assert (why.value.key, why.value.reason) == ("generator-default", DEFAULT_REASON)
    assert plan_module.call_generators([private, gen(7)])[0] is private


def test_is_default_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    assert plan_module.is_default_generator(torch.manual_seed(1))
    assert plan_module.is_default_generator(torch.random.default_generator)
    assert not plan_module.is_default_generator(gen())
    # An accelerator's default generators, as torch keeps them (this host has none to build).
    device_default = types.SimpleNamespace(device=torch.device("cuda", 0))
    own = types.SimpleNamespace(device=torch.device("cuda", 0))
    cuda = types.SimpleNamespace(default_generators=(device_default,))
    modules = {"cuda": cuda, "mps": types.SimpleNamespace()}

    def get_device_module(kind: str) -> Any:
        if kind not in modules:
            raise RuntimeError(f"Device '{kind}' does not have a corresponding module")
        return modules[kind]

    monkeypatch.setattr(torch, "get_device_module", get_device_module)
    assert plan_module.is_default_generator(device_default)  # type: ignore[arg-type]
    assert not plan_module.is_default_generator(own)  # type: ignore[arg-type]
    mps = types.SimpleNamespace(device=torch.device("mps"))
    assert not plan_module.is_default_generator(mps)  # type: ignore[arg-type]
    unknown = types.SimpleNamespace(device=types.SimpleNamespace(type="unknown"))
    assert not plan_module.is_default_generator(unknown)  # type: ignore[arg-type]


def test_unplanned_class(caplog: Any) -> None:
    out, report = plain_report(Unplanned(), caplog, "p", gen(40), None, ((4, 4),))
    assert bitwise_equal(out[0], torch.randn((4, 4), generator=gen(40))) and len(out) == 1
    reason = f"no noise plan for {Unplanned.__module__}.Unplanned"
    assert report.reason == reason and report.pipeline == "Unplanned"
    hint = "; prenoise.integrations.diffusers.supported() lists the classes with a plan"
    assert report_module._logged == {("Unplanned", "class")}
    assert warned(caplog) == [
        f"prenoise: Unplanned: noise not overlapped, plain call ({reason}){hint}"
    ]


@pytest.mark.parametrize(
    ("kwargs", "reason", "key"),
    [
        ({"latents": torch.zeros(2)}, "caller-supplied latents", "latents-given"),
        ({"shapes": ()}, "nothing to prepare", "empty-plan"),
        ({"planned": "boom"}, "plan failed: ValueError(\"invalid literal for int() with base 10: "
         "'b'\")", "plan-error"),
        ({"planned": [(16,)], "shapes": [(2, 8)], "generator": [gen(), gen()]}, "plan failed: "
         "ValueError(\"planned draw 'd0': 2 generators for batch 16\")", "plan-error"),
    ],
)  # fmt: skip
def test_unpredictable_calls(
    pipe: FakePipe, caplog: Any, kwargs: dict[str, Any], reason: str, key: str
) -> None:
    kwargs = {"generator": gen(), **kwargs}
    _, report = plain_report(pipe, caplog, **kwargs)
    assert report.reason == reason and report_module._logged == {("FakePipe", key)}
    assert warned(caplog) == [warning_for(reason)]


def test_the_version_string_decides_nothing(
    pipe: FakePipe, caplog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unreviewed version string (diffusers' main branch) with the reviewed code: planned."""
    for version in ("0.43.0.dev0", "0.1.0"):
        monkeypatch.setattr(diffusers, "__version__", version)
        out, report = call_module.overlapped_call_with_report(pipe, generator=gen(30))
        assert report.overlapped and report.served == 2
        assert all(bitwise_equal(a, b) for a, b in zip(out, pipe(generator=gen(30)), strict=True))


@pytest.fixture
def fresh_digests(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The digest gate with its tables copied and its verdicts forgotten (restored after)."""
    monkeypatch.setattr(digests, "_reviewed", {k: dict(v) for k, v in digests._reviewed.items()})
    monkeypatch.setattr(digests, "_explicit", dict(digests._explicit))
    monkeypatch.setattr(digests, "_problems", {})
    monkeypatch.setattr(digests, "_verdicts", {})
    return digests


def test_changed_code_runs_plain_naming_the_function(
    pipe: FakePipe, caplog: Any, fresh_digests: Any
) -> None:
    key = f"{FakePipe.__module__}:FakePipe.__call__"
    installed = fresh_digests.installed_digest(key)
    fresh_digests.register_reviewed_code(PATH, {key: {"0123456789ab": ("0.42.1",)}})
    out, report = plain_report(pipe, caplog, generator=gen(30))
    reason = (
        f"diffusers code differs from the reviewed code: FakePipe.__call__ ({FakePipe.__module__})"
        f" changed: digest {installed}, reviewed 0123456789ab (0.42.1)"
    )
    next_step = (
        "; the output is the plain call's, bitwise; prenoise's plans run on the code of "
        "diffusers 0.40.0, 0.41.0, 0.42.0, 0.42.1: install one of them, or report the changed "
        "function to prenoise"
    )
    assert report.reason == reason and warned(caplog) == [warning_for(reason, next_step)]
    assert report_module._logged == {("FakePipe", "changed-code")}
    assert all(bitwise_equal(a, b) for a, b in zip(out, pipe(generator=gen(30)), strict=True))
    fresh_digests.register_reviewed_code(PATH, {key: {installed: ("0.43.0.dev0",)}})
    assert call_module.overlapped_call_with_report(pipe, generator=gen(30))[1].overlapped


def test_enable_decides_and_warns_once_at_enable(
    pipe: FakePipe, caplog: Any, fresh_digests: Any
) -> None:
    from prenoise.integrations.diffusers import disable, enable

    key = f"{FakePipe.__module__}:FakePipe.__call__"
    fresh_digests.register_reviewed_code(PATH, {key: {"0123456789ab": ("0.42.1",)}})
    with caplog.at_level(logging.INFO, logger=LOGGER):
        enable(pipe)
        assert len(warned(caplog)) == 1 and "FakePipe.__call__" in warned(caplog)[0]
        out = pipe(generator=gen(30))  # plain: the same warning is not repeated
        enable(pipe)
    disable(pipe)
    assert len(warned(caplog)) == 1 and report_module._logged == {("FakePipe", "changed-code")}
    assert all(bitwise_equal(a, b) for a, b in zip(out, pipe(generator=gen(30)), strict=True))


def test_a_changed_scheduler_step_draws_per_step_noise_plainly(
    caplog: Any, fresh_digests: Any
) -> None:
    from diffusers import CogVideoXDPMScheduler

    from prenoise.integrations.diffusers import step_noise

    scheduler = CogVideoXDPMScheduler()
    scheduler.set_timesteps(3)
    pipe = types.SimpleNamespace(prepare_extra_step_kwargs=lambda *a: {})
    assert step_noise.expected_step_draws(scheduler) == 4
    assert step_noise.draws_in_this_call(pipe, scheduler, None)
    key = "diffusers.schedulers.scheduling_dpm_cogvideox:CogVideoXDPMScheduler.step"
    fresh_digests._reviewed[key] = {"0123456789ab": ("0.42.1",)}
    fresh_digests._forget_verdicts()  # the verdicts are cached per process
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert step_noise.expected_step_draws(scheduler) is None
        assert not step_noise.draws_in_this_call(pipe, scheduler, None)
    (message,) = warned(caplog)
    assert message.startswith(
        "prenoise: CogVideoXDPMScheduler: per-step noise drawn in the loop (diffusers code "
        "differs from the reviewed code: CogVideoXDPMScheduler.step "
        "(diffusers.schedulers.scheduling_dpm_cogvideox) changed: digest "
    )
    assert message.endswith(f"; {fresh_digests.NEXT_STEP}")


def test_a_changed_raw_draw_window_refuses_the_stream_call(fresh_digests: Any) -> None:
    from diffusers import LTXImageToVideoPipeline

    from prenoise.integrations.diffusers.raw_draws import call_window

    vae = types.SimpleNamespace(config=types.SimpleNamespace(timestep_conditioning=True))
    pipe = types.SimpleNamespace(vae=vae)
    assert call_window(LTXImageToVideoPipeline, pipe, "native") is None
    key = f"{LTXImageToVideoPipeline.__module__}:LTXImageToVideoPipeline._denormalize_latents"
    fresh_digests._reviewed[key] = {"0123456789ab": ("0.42.1",)}
    fresh_digests._forget_verdicts()  # the verdicts are cached per process
    with pytest.raises(noise_streams.NoiseStreamError) as refused:
        call_window(LTXImageToVideoPipeline, pipe, "x86")
    assert str(refused.value).startswith(
        "LTXImageToVideoPipeline: its decode noise (a raw torch.randn) cannot be drawn in noise "
        "stream 'x86': diffusers code differs from the reviewed code: "
        "LTXImageToVideoPipeline._denormalize_latents (diffusers.pipelines.ltx."
        "pipeline_ltx_image2video) changed: digest "
    )
    assert str(refused.value).endswith(
        f"refusing rather than drawing it natively; {fresh_digests.NEXT_STEP}"
    )


def test_a_modular_plan_is_gated_by_its_reviewed_code(fresh_digests: Any) -> None:
    from diffusers.modular_pipelines.minimax_h3.modular_pipeline import MiniMaxH3ModularPipeline

    from prenoise.integrations.diffusers.modular import call as modular_call

    plan, reason, key = modular_call._unplannable(MiniMaxH3ModularPipeline)
    assert plan is not None and reason is None and key is None
    changed = "diffusers.modular_pipelines.minimax_h3.encoders:encode_vae_condition"
    fresh_digests._reviewed[changed] = {"0123456789ab": ("0.42.1",)}
    fresh_digests._forget_verdicts()  # the verdicts are cached per process
    plan, reason, key = modular_call._unplannable(MiniMaxH3ModularPipeline)
    assert plan is None and key == "changed-code"
    assert reason.startswith(
        "diffusers code differs from the reviewed code: encode_vae_condition "
        "(diffusers.modular_pipelines.minimax_h3.encoders) changed: digest "
    )


def test_nested_call(pipe: FakePipe, caplog: Any) -> None:
    with replay_context(RandnTensorServer([])):
        _, report = plain_report(pipe, caplog, generator=gen())
    assert report.reason == "nested inside another overlapped call"
    assert report_module._logged == {("FakePipe", "nested")}


def test_arguments_that_do_not_bind(pipe: FakePipe, caplog: Any) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(TypeError):
        call_module.overlapped_call_with_report(pipe, generator=gen(), bogus=1)
    reason = "arguments do not bind: got an unexpected keyword argument 'bogus'"
    assert warned(caplog) == [warning_for(reason)]
    assert report_module._logged == {("FakePipe", "bind")}


def test_planner_unpredictable_and_invalid_draw(
    pipe: FakePipe, caplog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(p: Any, v: Any, gs: Any) -> list[PlannedDraw]:
        raise Unpredictable("not today", "custom")

    plan_with(monkeypatch, refuse)
    _, report = plain_report(pipe, caplog, generator=gen())
    assert report.reason == "not today" and warned(caplog) == [warning_for("not today")]
    assert report_module._logged == {("FakePipe", "custom")}
    caplog.clear()
    plan_with(monkeypatch, lambda p, v, gs: [PlannedDraw("i", (16,), torch.int64, gs, DDIM)])
    _, report = plain_report(pipe, caplog, generator=gen())
    reason = "draw 'i.0': dtype torch.int64 is not a floating dtype"
    assert report.stream == "native"
    assert report.reason == reason and warned(caplog) == [warning_for(reason)]
    assert report_module._logged == {("FakePipe", "custom"), ("FakePipe", "draw")}


def test_planner_sees_bound_arguments_without_self(
    pipe: FakePipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []

    def planner(p: Any, values: Any, gs: Any) -> list[PlannedDraw]:
        seen.append((p, dict(values), gs))
        return plan_fake(p, values, gs)

    plan_with(monkeypatch, planner)
    g = gen()
    planned = call_module.plan_call(pipe, ("x",), {"generator": [g]})
    bound = {"prompt": "x", "generator": [g], "latents": None, "shapes": ((2, 8), (16,))}
    assert seen == [(pipe, {**bound, "fail_at": None, "planned": None}, (g,))]
    assert [(p.label, p.shape, p.module) for p in planned] == [
        ("d0", (2, 8), DDIM),
        ("d1", (16,), DDIM),
    ]


def test_foreign_randn_tensor(pipe: FakePipe, caplog: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ddim, "randn_tensor", lambda *a, **k: randn_tensor(*a, **k))
    _, report = plain_report(pipe, caplog, generator=gen())
    reason = f"{DDIM}.randn_tensor is replaced by someone else"
    assert report.reason == reason and warned(caplog) == [warning_for(reason)]
    assert report_module._logged == {("FakePipe", "foreign")}


def test_own_module_without_randn_tensor_is_foreign(
    pipe: FakePipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_with(monkeypatch, lambda p, v, gs: [PlannedDraw("d0", (2, 8), F32, gs)])
    monkeypatch.delattr(sys.modules[__name__], "randn_tensor")
    with pytest.raises(Unpredictable, match=exact(f"{__name__}.randn_tensor is replaced by "
                                                  "someone else")):  # fmt: skip
        call_module.plan_call(pipe, (), {"generator": gen()})
    monkeypatch.setattr(sys.modules[__name__], "randn_tensor", ddim.randn_tensor, raising=False)
    assert len(call_module.plan_call(pipe, (), {"generator": gen()})) == 1


def test_dispatcher_in_place_is_accepted(pipe: FakePipe, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ddim, "randn_tensor", _dispatch)
    out, report = call_module.overlapped_call_with_report(pipe, generator=gen(34))
    assert report.overlapped and report.served == 2
    assert bitwise_equal(out[0], torch.randn((2, 8), generator=gen(34)))


def test_not_a_pipeline() -> None:
    with pytest.raises(TypeError, match=exact(
        "overlapped_call() takes a diffusers pipeline instance (a diffusers.DiffusionPipeline, "
        "e.g. WanPipeline.from_pretrained(...), or a diffusers ModularPipeline, e.g. "
        "MiniMaxH3Blocks().init_pipeline(...)), got None")):  # fmt: skip
        call_module.overlapped_call_with_report(None)


def test_noise_stream_overlapped_and_plain(
    pipe: FakePipe, caplog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipe, "_prenoise_noise_stream", "libm", raising=False)
    g, ref = gen(35), gen(35)
    out, report = call_module.overlapped_call_with_report(pipe, generator=g)
    assert report.overlapped and report.stream == "libm" and report.served == 2
    assert bitwise_equal(out[0], noise_streams.randn((2, 8), generator=ref, stream="libm"))
    assert bitwise_equal(out[1], noise_streams.randn((16,), generator=ref, stream="libm"))
    assert same_state(g, ref)
    out, report = call_module.overlapped_call_with_report(pipe, "p", g, torch.zeros(2))
    assert report.stream == "libm" and report.reason == "caller-supplied latents"
    assert isinstance(CONTEXTS[-1], StreamTarget) and CONTEXTS[-1].stream == "libm"
    assert bitwise_equal(out[0], noise_streams.randn((2, 8), generator=ref, stream="libm"))
    assert bitwise_equal(out[1], noise_streams.randn((16,), generator=ref, stream="libm"))
    out, report = call_module.overlapped_call_with_report(
        pipe, generator=g, latents=torch.zeros(2), shapes=((3,),)
    )  # the plain call in the stream gets the keywords too
    assert report.reason == "caller-supplied latents" and len(out) == 1
    assert bitwise_equal(out[0], noise_streams.randn((3,), generator=ref, stream="libm"))
    # a mismatch in the stream falls through to the stream's draw
    out, report = call_module.overlapped_call_with_report(
        pipe, generator=g, shapes=((2, 8), (4, 4)), planned=((2, 8), (16,))
    )
    assert report.served == 1 and report.left_plan is not None
    assert bitwise_equal(out[0], noise_streams.randn((2, 8), generator=ref, stream="libm"))
    assert bitwise_equal(out[1], noise_streams.randn((4, 4), generator=ref, stream="libm"))
    assert same_state(g, ref) and active_replay() is None


def test_log_once_and_say_active_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        report_module.log_once("P", "generator-device", "on cuda")
        report_module.log_once("P", "generator-device", "on cuda again")
        report_module.log_once("Q", "generator-device", "on cuda")
        report_module.log_once("P", "other", "why")
        report_module.say_active_once("P", draws(("a", (16,), (gen(),)), ("b", (16,), (gen(),))))
        report_module.say_active_once("P", [])
    hint = (
        "; pass a CPU generator to overlap it (the output then follows the CPU generator's "
        "noise, as in the plain call with that generator)"
    )
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, f"prenoise: P: noise not overlapped, plain call (on cuda){hint}"),
        (logging.WARNING, f"prenoise: Q: noise not overlapped, plain call (on cuda){hint}"),
        (logging.WARNING, "prenoise: P: noise not overlapped, plain call (why)"),
        (logging.INFO, "prenoise: P: overlapped noise active (prepared draws: a, b)"),
    ]
    assert report_module.first_time("R", "k") is True
    assert report_module.first_time("R", "k") is False
    assert report_module.first_time("k", "R") is True


def test_draws_run_on_the_named_worker(pipe: FakePipe, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real_run_draw = served_module.run_draw

    def run_draw(d: Any, g: Any, **kw: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real_run_draw(d, g, **kw)

    monkeypatch.setattr(served_module, "run_draw", run_draw)
    call_module.overlapped_call_with_report(pipe, generator=gen())
    assert len(threads) == 2
    assert all(re.fullmatch(r"prenoise-diffusers#\d+-0_0", t) for t in threads), threads


def test_ending_joins_every_job_that_was_not_cancelled() -> None:
    # Not reachable with the one-lane executor (its cancelled jobs are a suffix of the plan);
    # the queue still joins each job it could not cancel, wherever it sits.
    g1, g2, r1, r2 = gen(41), gen(42), gen(41), gen(42)
    q, ex = started(draws(("a", (16,), (g1,)), ("b", (16,), (g1,)), ("c", (16,), (g2,))))
    ex.run("2:c")
    assert q.finish() == "the call did not make the planned draw(s): a, b, c"
    assert ex.taken == ["2:c"]
    assert same_state(g1, r1) and same_state(g2, r2)


def test_a_value_error_outside_the_draws_is_not_reported_as_a_draw(
    pipe: FakePipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planner errors become a warned plain call ("plan failed"); a bug in prenoise's own
    planning step must surface, not pass for an unbuildable draw."""

    def broken(pipe: Any, args: Any, kwargs: Any) -> tuple[list[PlannedDraw], dict[str, Any]]:
        raise ValueError("a bug in plan_call")

    monkeypatch.setattr(call_module, "_plan_with_arguments", broken)  # what plan_call runs
    with pytest.raises(ValueError, match=r"^a bug in plan_call$"):
        call_module.overlapped_call_with_report(pipe, generator=gen())
