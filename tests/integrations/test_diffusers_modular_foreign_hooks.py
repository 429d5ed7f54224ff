"""Hardening round 4, class 2: prenoise's block hook composes with other libraries' wrappers.

A tracing tool that wraps `ModularPipelineBlocks.get_block_state` on first use — while an
enabled modular call runs, before one, or after — must never make a later call recurse (the
old hook took the wrapper around its own dispatcher for diffusers' method: dispatcher ->
wrapper -> dispatcher -> ... RecursionError in every later modular call of the process), never
change a plain call, and keep seeing every block.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("diffusers")

import tiny_minimax_h3 as tiny
from test_diffusers_modular_h3 import assert_states_equal, both_arms

from prenoise.integrations.diffusers import disable
from prenoise.integrations.diffusers.modular import hook


@pytest.fixture(scope="module")
def pipe() -> Iterator[Any]:
    pipe = tiny.minimax_h3()
    yield pipe
    disable(pipe)


@pytest.fixture
def blocks() -> Iterator[Any]:
    from diffusers.modular_pipelines.modular_pipeline import ModularPipelineBlocks

    original = ModularPipelineBlocks.__dict__["get_block_state"]
    yield ModularPipelineBlocks
    ModularPipelineBlocks.get_block_state = original


def _tracer(cls: Any, seen: list[str]) -> None:
    """Wrap whatever holds `get_block_state` now, as a tracing tool does."""
    inner = cls.__dict__["get_block_state"]

    @functools.wraps(inner)
    def traced(self: Any, state: Any) -> Any:
        seen.append(type(self).__name__)
        return inner(self, state)

    cls.get_block_state = traced


def _kwargs() -> dict[str, Any]:
    return tiny.call_kwargs("t2va", seed=2)


def test_a_wrapper_installed_during_an_enabled_call(
    pipe: Any, blocks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real = hook._dispatch
    wrapped_once: list[bool] = []

    def first_use(self: Any, state: Any) -> Any:
        if not wrapped_once:  # the tracing tool wraps on first use, inside the enabled call
            wrapped_once.append(True)
            _tracer(blocks, seen)
        return real(self, state)

    monkeypatch.setattr(hook, "_dispatch", first_use)
    plain, out, report = both_arms(pipe, _kwargs)
    monkeypatch.undo()
    assert_states_equal(plain, out)
    assert wrapped_once
    for _ in range(2):  # every later call, enabled or plain: no recursion, the same bits
        plain, out, report = both_arms(pipe, _kwargs)
        assert_states_equal(plain, out)
        assert report.overlapped and report.served == len(report.planned)
    assert seen  # the tracer still sees the blocks


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_wrapper_installed_before_or_after_enabled_calls(
    pipe: Any, blocks: Any, when: str
) -> None:
    seen: list[str] = []
    if when == "before":
        _tracer(blocks, seen)
    plain, out, report = both_arms(pipe, _kwargs)
    assert_states_equal(plain, out)
    if when == "after":
        _tracer(blocks, seen)
    for _ in range(2):
        plain, out, report = both_arms(pipe, _kwargs)
        assert_states_equal(plain, out)
        assert report.overlapped and report.served == len(report.planned)
    assert seen and not hook.is_installed()


def test_a_dispatcher_wrapped_without_wraps_cannot_recurse(pipe: Any, blocks: Any) -> None:
    """A wrapper that hides what it wraps (no `__wrapped__`) around the installed dispatcher:
    the re-entry goes to diffusers' own method, once."""
    seen: list[str] = []
    hook._acquire()
    try:
        inner = blocks.__dict__["get_block_state"]
        assert inner is hook._dispatch

        def opaque(self: Any, state: Any) -> Any:
            seen.append("x")
            return inner(self, state)

        blocks.get_block_state = opaque
    finally:
        hook._release()
    plain, out, report = both_arms(pipe, _kwargs)
    assert_states_equal(plain, out)
    assert report.overlapped and seen
