"""The one preparation core (`preparation/served.py`, `preparation/lookahead.py`), engine-neutral.

Real executors, real generators: every served tensor is compared bit for bit with the serial
draw, every generator state byte for byte, and the draws' threads by name. The integrations'
own tests (diffusers classic and modular, vLLM-Omni, SGLang) run the same core through their
hooks; `test_core_breaks_fail_every_integration` in each integration breaks it on purpose.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prenoise.preparation.draws import Draw
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.lookahead import LookaheadLimits, StepLookahead
from prenoise.preparation.served import KeyedDraw, ServedDraws, rows_work

F32 = torch.float32


def gen(seed: int) -> torch.Generator:
    return torch.Generator("cpu").manual_seed(seed)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32 if t.element_size() == 4 else torch.int16)


def keyed(label: str, shape: tuple[int, ...], *gens: torch.Generator) -> KeyedDraw:
    row = shape if len(gens) == 1 else (1, *shape[1:])
    draws = [Draw(f"{label}.{i}", row, F32) for i in range(len(gens))]
    return KeyedDraw(label, (shape, tuple(id(g) for g in gens)), rows_work(draws), gens)


def serial(shape: tuple[int, ...], *gens: torch.Generator) -> torch.Tensor:
    if len(gens) == 1:
        return torch.randn(shape, generator=gens[0])
    return torch.cat([torch.randn((1, *shape[1:]), generator=g) for g in gens])


def test_served_draws_are_the_serial_draws_made_on_the_worker() -> None:
    g1, g2, r1, r2 = gen(1), gen(2), gen(1), gen(2)
    threads: list[str] = []
    plan = [keyed("a", (3, 5), g1), keyed("b", (2, 4), g1, g2), keyed("c", (7,), g2)]
    recorded = [KeyedDraw(d.label, d.key, _recording(d.work, threads), d.generators) for d in plan]
    with PreparationExecutor(name="core-test") as ex:
        served = ServedDraws(ex)
        served.submit(recorded)
        assert served.owns(g1) and served.owns(g2) and not served.owns(gen(3))
        for d, shape, gens in (
            (plan[0], (3, 5), (g1,)),
            (plan[1], (2, 4), (g1, g2)),
            (plan[2], (7,), (g2,)),
        ):
            out = served.serve(d.key, gens)
            assert out is not None
            expected = serial(shape, *(r1 if g is g1 else r2 for g in gens))
            assert torch.equal(bits(out), bits(expected))
            assert torch.equal(g1.get_state(), r1.get_state())
            assert torch.equal(g2.get_state(), r2.get_state())
        assert served.finish() is None and served.served == 3
    assert threads and all(t.startswith("core-test#") for t in threads)
    assert threading.current_thread().name not in threads


def _recording(work: Any, threads: list[str]) -> Any:
    def run(clones: tuple[torch.Generator, ...]) -> torch.Tensor:
        threads.append(threading.current_thread().name)
        return work(clones)  # type: ignore[no-any-return]

    return run


def test_the_worker_never_moves_the_callers_generator() -> None:
    g, ref = gen(4), gen(4)
    done = threading.Event()
    plan = [keyed("a", (64,), g), KeyedDraw("mark", "m", lambda _: _set(done))]
    with PreparationExecutor() as ex:
        served = ServedDraws(ex)
        served.submit(plan)
        assert done.wait(30)
        assert torch.equal(g.get_state(), ref.get_state())  # drawn, not served: unmoved
        assert served.finish() == "the call did not make the planned draw(s): a, mark"
    assert torch.equal(g.get_state(), ref.get_state())


def _set(event: threading.Event) -> torch.Tensor:
    event.set()
    return torch.zeros(1)


@pytest.mark.parametrize("how", ["one byte", "a draw", "a reseed"])
def test_a_generator_moved_by_anything_is_not_served(how: str) -> None:
    """A state that differs in one byte is another state: the serial draw runs from it."""
    g = gen(5)
    with PreparationExecutor() as ex:
        served = ServedDraws(ex)
        served.submit([keyed("a", (16,), g), keyed("b", (16,), g)])
        if how == "one byte":
            state = g.get_state()
            state[424] ^= 1  # the low byte of one Mersenne-Twister word (of 624)
            g.set_state(state)
        elif how == "a draw":
            torch.randn(1, generator=g)
        else:
            g.manual_seed(5)
            torch.randn(1, generator=g)
        before = g.get_state()
        assert served.serve(((16,), (id(g),)), (g,)) is None
        assert torch.equal(g.get_state(), before)  # untouched: the caller draws serially
        assert served.ended is not None and "generator moved" in served.ended
        assert served.serve(((16,), (id(g),)), (g,)) is None  # ended: every later call too
        assert ex.pending == []  # the rest was cancelled or joined


def test_a_key_mismatch_ends_the_plan_cancelling_and_joining() -> None:
    g = gen(6)
    gate, running = threading.Event(), threading.Event()

    def blocked(clones: tuple[torch.Generator, ...]) -> torch.Tensor:
        running.set()
        assert gate.wait(30)
        return torch.zeros(1)

    told: list[tuple[str, Any, Any]] = []
    ran: list[str] = []
    later = [keyed("a", (16,), g), keyed("b", (16,), g)]
    later = [KeyedDraw(d.label, d.key, _recording(d.work, ran), d.generators) for d in later]
    with PreparationExecutor() as ex:
        served = ServedDraws(ex)
        served.submit([KeyedDraw("slow", "k0", blocked), *later])
        assert running.wait(30)
        threading.Timer(0.05, gate.set).start()
        assert served.serve("other", (), on_key_mismatch=lambda *m: told.append(m)) is None
        assert ex.pending == []  # 'slow' joined, 'a' and 'b' cancelled
        assert told == [("slow", "k0", "other")]
        assert served.ended == "draw 'slow' was planned as 'k0', the call is 'other'"
    assert ran == []  # cancelled before they started: no time spent on them
    assert torch.equal(g.get_state(), gen(6).get_state())


def test_a_failed_draw_is_never_handed_over() -> None:
    def fails(clones: tuple[torch.Generator, ...]) -> torch.Tensor:
        raise RuntimeError("boom")

    with PreparationExecutor() as ex:
        served = ServedDraws(ex)
        served.submit([KeyedDraw("x", 1, fails)])
        assert served.serve(1) is None
        assert served.ended == "prepared draw 'x' failed: RuntimeError('boom')"


def test_seeded_draws_by_label_and_discard() -> None:
    """Draws that seed their own generator (no caller generator): served by label and key."""

    def seeded(seed: int) -> Any:
        return lambda _clones: torch.randn(8, generator=gen(seed))

    with PreparationExecutor() as ex:
        served = ServedDraws(ex, job_name=lambda i, d: f"req:{d.label}")
        served.submit([KeyedDraw("video", 1, seeded(1)), KeyedDraw("cond", 2, seeded(2))])
        served.discard("cond")
        out = served.serve(1, label="video")
        assert out is not None and torch.equal(bits(out), bits(torch.randn(8, generator=gen(1))))
        assert served.serve(2, label="cond") is None and served.ended is None  # discarded
        assert served.finish() is None


def test_a_generator_subclass_is_refused_before_anything_runs() -> None:
    class Lying(torch.Generator):
        def get_state(self) -> torch.Tensor:
            return gen(0).get_state()

    with PreparationExecutor() as ex:
        served = ServedDraws(ex)
        with pytest.raises(ValueError, match="Lying"):
            served.submit([keyed("a", (4,), Lying())])
        assert ex.pending == []


@settings(max_examples=25, deadline=None)
@given(
    shapes=st.lists(st.integers(1, 40), min_size=1, max_size=5),
    seed=st.integers(0, 2**32 - 1),
    served_count=st.integers(0, 5),
    moved_at=st.one_of(st.none(), st.integers(0, 5)),
)
def test_differential_served_vs_serial(
    shapes: list[int], seed: int, served_count: int, moved_at: int | None
) -> None:
    """Whatever prefix is served and wherever something else draws from the generator, the
    caller sees the serial draws and ends in the serial state."""
    g, ref = gen(seed), gen(seed)
    with PreparationExecutor() as ex:
        served = ServedDraws(ex)
        served.submit([keyed(f"d{i}", (n,), g) for i, n in enumerate(shapes)])
        for i, n in enumerate(shapes[:served_count]):
            if moved_at == i:
                torch.randn(1, generator=g)
                torch.randn(1, generator=ref)
            out = served.serve(((n,), (id(g),)), (g,))
            if out is None:
                out = torch.randn((n,), generator=g)
            assert torch.equal(bits(out), bits(torch.randn((n,), generator=ref)))
        served.finish()
    assert torch.equal(g.get_state(), ref.get_state())


# -- per-step look-ahead ----------------------------------------------------------------------


def _lookahead(ex: PreparationExecutor, draws: int, steps: int = 2) -> StepLookahead:
    return StepLookahead(ex, "native", LookaheadLimits(steps=steps), lambda: draws, lambda: "?")


def test_step_lookahead_serves_each_step_bitwise_from_its_clone_chain() -> None:
    g, ref = gen(7), gen(7)
    with PreparationExecutor() as ex:
        look = _lookahead(ex, draws=5)
        plain = lambda: torch.randn((4, 4), generator=g)  # noqa: E731
        for _ in range(5):
            out = look.serve((4, 4), (g,), F32, None, None, plain)
            assert torch.equal(bits(out), bits(torch.randn((4, 4), generator=ref)))
            assert torch.equal(g.get_state(), ref.get_state())
        look.finish()
    assert look.served == 4 and look.left is None and look.unused == 0


def test_step_lookahead_first_draw_from_a_given_start_state() -> None:
    g, ref = gen(8), gen(8)
    torch.randn(10, generator=ref)  # the state "the draws before it" leave the generator in
    start = ref.get_state()
    with PreparationExecutor() as ex:
        look = _lookahead(ex, draws=2)
        look.prepare_first((3,), g, (F32,), lambda: start)
        torch.randn(10, generator=g)  # the caller's own (served) draws arrive there too
        out = look.serve((3,), (g,), F32, None, None, lambda: pytest.fail("plain draw"))
        assert look.first_ahead
        assert torch.equal(bits(out), bits(torch.randn((3,), generator=ref)))
        look.finish()


@pytest.mark.parametrize("moved", [False, True])
def test_step_lookahead_first_draw_for_a_generator_made_later(moved: bool) -> None:
    """`prepare_first(generator=None)`: the loop makes its generator after the guess was
    submitted (seeded with a known seed); served to whatever generator is exactly in that
    state, else the plain draw (a generator moved before its first draw)."""
    ref = gen(11)
    with PreparationExecutor() as ex:
        look = _lookahead(ex, draws=2)
        look.prepare_first((5,), None, (F32,), lambda: gen(11).get_state())
        g = gen(11)  # made by the loop, after the guess
        if moved:
            torch.randn(1, generator=g)
            torch.randn(1, generator=ref)
        plain = lambda: torch.randn((5,), generator=g)  # noqa: E731
        out = look.serve((5,), (g,), F32, None, None, plain)
        assert look.first_ahead is not moved
        assert torch.equal(bits(out), bits(torch.randn((5,), generator=ref)))
        assert torch.equal(g.get_state(), ref.get_state())
        look.finish()
    with pytest.raises(ValueError, match="start_state"):
        _lookahead(PreparationExecutor(), draws=1).prepare_first((5,), None, (F32,))


def test_step_lookahead_ends_on_a_moved_generator_and_counts_the_unused() -> None:
    g, ref = gen(9), gen(9)
    with PreparationExecutor() as ex:
        look = _lookahead(ex, draws=4, steps=3)
        plain = lambda: torch.randn((4,), generator=g)  # noqa: E731
        look.serve((4,), (g,), F32, None, None, plain)
        torch.randn((4,), generator=ref)
        torch.randn(1, generator=g)  # a step callback draws from it
        torch.randn(1, generator=ref)
        out = look.serve((4,), (g,), F32, None, None, plain)
        assert torch.equal(bits(out), bits(torch.randn((4,), generator=ref)))
        assert ex.pending == []
    assert look.left == "the generator changed between steps (something else drew from it)"
    assert look.unused == 3 and look.served == 0
    assert torch.equal(g.get_state(), ref.get_state())
