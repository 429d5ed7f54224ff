"""The replay patch is context-local, thread-safe and always restored; `enable`/`disable`."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

pytest.importorskip("diffusers")

import torch
from diffusers_tiny import (
    BUILDERS,
    assert_bitwise_equal,
    assert_same_states,
    call_kwargs,
    generators,
    output_tensor,
)

from prenoise.integrations.diffusers import (
    disable,
    enable,
    is_enabled,
    overlapped_call,
    overlapped_call_with_report,
)
from prenoise.integrations.diffusers.patching import (
    is_dispatcher,
    original_randn_tensor,
    patched_modules,
)


def _modules_with_dispatcher() -> list[str]:
    return [
        name
        for name, module in list(sys.modules.items())
        if name.startswith("diffusers.") and is_dispatcher(getattr(module, "randn_tensor", None))
    ]


def test_nothing_is_patched_outside_a_call(tiny: Any) -> None:
    overlapped_call(tiny("wan21"), generator=generators([0])[0], **call_kwargs("wan21"))
    assert _modules_with_dispatcher() == [] and patched_modules() == {}
    import diffusers.pipelines.wan.pipeline_wan as wan_module

    assert wan_module.randn_tensor is original_randn_tensor()


def test_names_are_restored_after_an_exception(tiny: Any) -> None:
    import diffusers.pipelines.wan.pipeline_wan as wan_module

    seen: list[bool] = []

    def explode(pipe: Any, step: int, t: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        seen.append(is_dispatcher(wan_module.randn_tensor))
        raise KeyError("callback failed")

    with pytest.raises(KeyError, match="callback failed"):
        overlapped_call(
            tiny("wan21"),
            generator=generators([1])[0],
            callback_on_step_end=explode,
            **call_kwargs("wan21"),
        )
    assert seen == [True]  # the patch was live during the call ...
    assert _modules_with_dispatcher() == [] and patched_modules() == {}  # ... and is gone now
    assert wan_module.randn_tensor is original_randn_tensor()


def test_other_threads_fall_through_while_the_patch_is_live(tiny: Any) -> None:
    """Another request thread calls the same pipeline module's `randn_tensor` (and a pipeline of
    the same class, plainly) during an overlapped call: it gets exactly what it would get alone.
    (One pipeline instance is not re-entrant in diffusers: its scheduler holds the step index.)"""
    import diffusers.pipelines.wan.pipeline_wan as wan_module

    pipe, other_pipe, kwargs = tiny("wan21"), BUILDERS["wan21"](), call_kwargs("wan21")
    shape = (1, 16, 3, 4, 4)
    reference_gen = torch.Generator().manual_seed(99)
    reference = [torch.randn(shape, generator=reference_gen) for _ in range(3)]
    expected_plain = other_pipe(generator=generators([42])[0], **kwargs)
    patched_draws = threading.Event()
    done = threading.Event()
    other: dict[str, Any] = {"draws": [], "patched": []}

    def other_request() -> None:
        g = torch.Generator().manual_seed(99)
        for _ in range(3):
            other["patched"].append(is_dispatcher(wan_module.randn_tensor))
            other["draws"].append(wan_module.randn_tensor(shape, generator=g))
        patched_draws.set()
        other["plain"] = other_pipe(generator=generators([42])[0], **kwargs)
        done.set()

    thread = threading.Thread(target=other_request)

    def hold_the_patch(p: Any, step: int, t: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        if step == 0:
            thread.start()
            assert patched_draws.wait(30) and done.wait(60)
        return {}

    pg, og = generators([7]), generators([7])
    plain = pipe(generator=pg[0], **kwargs)
    out, report = overlapped_call_with_report(
        pipe, generator=og[0], callback_on_step_end=hold_the_patch, **kwargs
    )
    thread.join(30)
    assert report.overlapped and report.served == 1
    assert all(other["patched"]), "the other thread ran while the patch was installed"
    for drawn, ref in zip(other["draws"], reference, strict=True):
        assert_bitwise_equal(drawn, ref)
    assert_bitwise_equal(output_tensor(other["plain"]), output_tensor(expected_plain))
    assert_bitwise_equal(output_tensor(plain), output_tensor(out))
    assert_same_states(pg, og)
    assert _modules_with_dispatcher() == []


def test_concurrent_overlapped_calls(tiny: Any) -> None:
    """Two overlapped calls on two threads share the patch; each gets its own draws."""
    pipes, kwargs = {1: tiny("ltx"), 2: BUILDERS["ltx"]()}, call_kwargs("ltx")
    expected = {s: output_tensor(pipes[s](generator=generators([s])[0], **kwargs)) for s in pipes}
    results: dict[int, Any] = {}
    barrier = threading.Barrier(2)

    def run(seed: int) -> None:
        barrier.wait(10)
        gen = generators([seed])[0]
        results[seed] = overlapped_call_with_report(pipes[seed], generator=gen, **kwargs)

    threads = [threading.Thread(target=run, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for seed in (1, 2):
        out, report = results[seed]
        assert report.overlapped and report.left_plan is None
        assert_bitwise_equal(output_tensor(out), expected[seed])
    assert _modules_with_dispatcher() == []


def test_enable_routes_plain_calls_and_disable_restores(tiny: Any) -> None:
    pipe = tiny("flux")
    cls = type(pipe)
    pg, og = generators([3]), generators([3])
    plain = pipe(generator=pg[0], **call_kwargs("flux"))
    seen: list[bool] = []

    def watch(p: Any, step: int, t: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        import diffusers.pipelines.flux.pipeline_flux as flux_module

        seen.append(is_dispatcher(flux_module.randn_tensor))
        return {}

    assert enable(pipe) is pipe and is_enabled(pipe)
    try:
        assert type(pipe).__name__ == cls.__name__ and isinstance(pipe, cls)
        enable(pipe)  # idempotent
        out = pipe(generator=og[0], callback_on_step_end=watch, **call_kwargs("flux"))
    finally:
        disable(pipe)
    assert seen and all(seen)
    assert type(pipe) is cls and not is_enabled(pipe)
    assert_bitwise_equal(output_tensor(plain), output_tensor(out))
    assert_same_states(pg, og)
