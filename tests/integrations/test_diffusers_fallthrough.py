"""Calls that cannot be predicted run the plain call (logged once); the output never differs."""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("diffusers")

import torch
from diffusers_tiny import (
    assert_bitwise_equal,
    assert_same_states,
    call_kwargs,
    generators,
    global_rng_arms,
    output_tensor,
)

from prenoise.integrations.diffusers import (
    PlannedDraw,
    overlapped_call_with_report,
    register_plan,
)
from prenoise.integrations.diffusers.pipelines.wan import plan_wan

LOGGER = "prenoise.integrations.diffusers"
WAN = "diffusers.pipelines.wan.pipeline_wan.WanPipeline"


@pytest.fixture
def wan_plan_restored() -> Any:
    yield
    register_plan(WAN, plan_wan)


def test_generator_none_uses_the_global_rng_like_the_plain_call(
    tiny: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pipe, kwargs = tiny("wan21"), call_kwargs("wan21")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plain, overlapped, report, after_plain, after_overlapped = global_rng_arms(pipe, kwargs)
        with torch.random.fork_rng(devices=[]):
            overlapped_call_with_report(pipe, **kwargs)
    assert not report.overlapped and "generator is None" in str(report.reason)
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert torch.equal(after_plain, after_overlapped)
    assert sum("generator is None" in r.getMessage() for r in caplog.records) == 1  # once


def test_caller_latents_fall_through(tiny: Any) -> None:
    pipe, kwargs = tiny("wan21"), call_kwargs("wan21")
    latents = torch.randn((1, 16, 3, 4, 4), generator=torch.Generator().manual_seed(1))
    pg, og = generators([2]), generators([2])
    plain = pipe(generator=pg[0], latents=latents, **kwargs)
    overlapped, report = overlapped_call_with_report(
        pipe, generator=og[0], latents=latents, **kwargs
    )
    assert not report.overlapped and report.reason == "caller-supplied latents"
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert_same_states(pg, og)


def test_unknown_subclass_falls_through(tiny: Any, caplog: pytest.LogCaptureFixture) -> None:
    pipe = tiny("wan21")
    subclass = type("MyWanPipeline", (type(pipe),), {})
    pipe.__class__ = subclass
    try:
        pg, og = generators([3]), generators([3])
        plain = pipe(generator=pg[0], **call_kwargs("wan21"))
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            out, report = overlapped_call_with_report(pipe, generator=og[0], **call_kwargs("wan21"))
    finally:
        pipe.__class__ = subclass.__bases__[0]
    assert not report.overlapped and "no noise plan" in str(report.reason)
    assert any("MyWanPipeline" in r.getMessage() for r in caplog.records)
    assert_bitwise_equal(output_tensor(plain), output_tensor(out))
    assert_same_states(pg, og)


def test_an_unreviewed_version_string_with_the_reviewed_code_is_overlapped(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Support is decided by the source digests (`digests.py`), not by the version string:
    test_diffusers_dev_release.py runs a real 0.43.0.dev0 copy, and a changed function."""
    import diffusers

    monkeypatch.setattr(diffusers, "__version__", "0.99.0")
    pg, og = generators([4]), generators([4])
    plain = tiny("flux")(generator=pg[0], **call_kwargs("flux"))
    out, report = overlapped_call_with_report(tiny("flux"), generator=og[0], **call_kwargs("flux"))
    assert report.overlapped and report.served == 1 and report.reason is None
    assert_bitwise_equal(output_tensor(plain), output_tensor(out))
    assert_same_states(pg, og)


@pytest.mark.parametrize("wrong", ["shape", "dtype", "extra_draw", "missing_draw"])
def test_a_wrong_plan_is_discarded_exactly(
    tiny: Any, wrong: str, wan_plan_restored: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Mismatches are caught at consumption: prepared draws are discarded, generators rewound."""

    def wrong_plan(pipe: Any, args: Any, gens: tuple[torch.Generator, ...]) -> list[PlannedDraw]:
        (right,) = plan_wan(pipe, args, gens)
        if wrong == "shape":
            return [PlannedDraw("noise", (1, 16, 3, 4, 2), torch.float32, gens)]
        if wrong == "dtype":
            return [PlannedDraw("noise", right.shape, torch.float64, gens)]
        if wrong == "extra_draw":  # a draw the call never makes: rewound at the end
            return [right, PlannedDraw("phantom", (64,), torch.float32, gens)]
        return [PlannedDraw("early", (32,), torch.float32, gens), right]

    register_plan(WAN, wrong_plan)
    pipe = tiny("wan21")
    pg, og = generators([5]), generators([5])
    plain = pipe(generator=pg[0], **call_kwargs("wan21"))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        out, report = overlapped_call_with_report(pipe, generator=og[0], **call_kwargs("wan21"))
    assert report.overlapped and report.left_plan is not None
    assert report.served == (1 if wrong == "extra_draw" else 0)
    served = f"{report.served} of {len(report.planned)} prepared draws served, the rest discarded"
    assert any(served in r.getMessage() for r in caplog.records)
    assert_bitwise_equal(output_tensor(plain), output_tensor(out))
    assert_same_states(pg, og)


def test_failed_preparation_falls_back_to_the_original(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prenoise.preparation import served

    def broken_draw(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise MemoryError("no room on the worker")

    monkeypatch.setattr(served, "run_draw", broken_draw)
    pg, og = generators([6]), generators([6])
    plain = tiny("ltx")(generator=pg[0], **call_kwargs("ltx"))
    out, report = overlapped_call_with_report(tiny("ltx"), generator=og[0], **call_kwargs("ltx"))
    assert report.served == 0 and "failed" in str(report.left_plan)
    assert_bitwise_equal(output_tensor(plain), output_tensor(out))
    assert_same_states(pg, og)


def test_exception_in_encoding_leaves_generator_untouched(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = tiny("wan21")
    untouched = generators([7])[0].get_state()

    def failing_encode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("encoder exploded")

    monkeypatch.setattr(pipe, "encode_prompt", failing_encode)
    (g,) = generators([7])
    with pytest.raises(RuntimeError, match="encoder exploded"):
        overlapped_call_with_report(pipe, generator=g, **call_kwargs("wan21"))
    assert torch.equal(g.get_state(), untouched)


def test_exception_after_the_draws_matches_the_plain_call(tiny: Any) -> None:
    """LTX image-to-video decode noise with a generator list raises inside diffusers."""
    pipe, kwargs = tiny("ltx_i2v"), call_kwargs("ltx_i2v", 2)
    pg, og = generators([8, 9]), generators([8, 9])
    with pytest.raises(TypeError) as plain_error:
        pipe(generator=pg, **kwargs)
    with pytest.raises(TypeError) as overlapped_error:
        overlapped_call_with_report(pipe, generator=og, **kwargs)
    assert str(plain_error.value) == str(overlapped_error.value)
    assert_same_states(pg, og)
