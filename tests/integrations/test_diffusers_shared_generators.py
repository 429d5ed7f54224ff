"""A generator other code on the request thread draws from is never drawn on the worker.

`torch.manual_seed(seed)` returns `torch.default_generator`, the global CPU RNG. An encoder in
train mode (diffusers' own `TestFluxPipeline` builds its T5 so) draws its dropout from it while
the prompt is encoded, which is exactly when prenoise draws the noise on its worker: the stream
would be reordered, so the images differ while the generator's final state is equal. Such calls
run the plain call instead, warned once. With a private generator the call still overlaps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("diffusers")

import torch
from diffusers_tiny import (
    assert_bitwise_equal,
    assert_outputs_bitwise_equal,
    assert_same_states,
    both_arms,
    call_kwargs,
    generators,
    output_tensor,
)
from test_diffusers_bitwise import PIPELINES

import prenoise.integrations.diffusers.call as call_module
from prenoise.integrations.diffusers import disable, enable
from prenoise.integrations.diffusers.served_calls import RandnTensorServer
from prenoise.preparation.executor import PreparationExecutor

LOGGER = "prenoise.integrations.diffusers"
CALLS = 8
REASON = (
    "generator is torch's default cpu generator: other code on this thread (e.g. encoder "
    "dropout) draws from it too"
)
WARNING = (
    f"prenoise: FluxPipeline: noise not overlapped, plain call ({REASON}); pass "
    'generator=torch.Generator("cpu").manual_seed(seed) instead to overlap it '
    "(torch.manual_seed(seed) returns the default CPU generator)"
)


class WorkerFirst:
    """Each overlapped call's worker finishes every prepared job before the pipeline's own call
    starts: the order a fast worker usually gives, made certain. A request-thread draw from a
    planned generator during the call then comes after the worker's draws, not before them as
    in the plain call, and changes the output."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.queues_started = 0
        self._finished = 0
        self._cond = threading.Condition()
        real_run, real_start = PreparationExecutor._run, RandnTensorServer.start

        def run(executor: PreparationExecutor, job: Any, work: Any) -> Any:
            try:
                return real_run(executor, job, work)
            finally:
                with self._cond:
                    self._finished += 1
                    self._cond.notify_all()

        def start(queue: RandnTensorServer, executor: PreparationExecutor) -> None:
            with self._cond:
                self._finished = 0
            real_start(queue, executor)
            with self._cond:
                done = self._cond.wait_for(lambda: self._finished >= len(queue.planned), 30)
            assert done, "the prepared jobs did not finish"
            self.queues_started += 1

        monkeypatch.setattr(PreparationExecutor, "_run", run)
        monkeypatch.setattr(RandnTensorServer, "start", start)


@pytest.fixture
def worker_first(monkeypatch: pytest.MonkeyPatch) -> WorkerFirst:
    return WorkerFirst(monkeypatch)


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The `CallReport` of every call routed through prenoise (enabled pipes included)."""
    seen: list[Any] = []
    real = call_module.overlapped_call_with_report

    def recording(pipe: Any, *args: Any, **kwargs: Any) -> Any:
        output, report = real(pipe, *args, **kwargs)
        seen.append(report)
        return output, report

    monkeypatch.setattr(call_module, "overlapped_call_with_report", recording)
    yield seen


def _on_default_generator(pipe: Any, kwargs: dict[str, Any]) -> tuple[Any, torch.Tensor]:
    """`pipe(generator=torch.manual_seed(0))` and the global RNG state it leaves."""
    output = pipe(generator=torch.manual_seed(0), **kwargs)
    return output, torch.get_rng_state()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_the_train_mode_encoder_draws_dropout_from_the_global_rng(tiny: Any) -> None:
    """The premise: the image depends on the global RNG's state when encoding starts."""
    pipe, kwargs = tiny("flux_dropout"), call_kwargs("flux")
    images = []
    with torch.random.fork_rng(devices=[]):
        for global_seed in (1, 2, 1):
            torch.manual_seed(global_seed)
            images.append(output_tensor(pipe(generator=generators([0])[0], **kwargs)))
    assert_bitwise_equal(images[0], images[2])
    assert not torch.equal(images[0], images[1])


def test_default_generator_runs_the_plain_call_bitwise(
    tiny: Any,
    worker_first: WorkerFirst,
    reports: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipe, kwargs = tiny("flux_dropout"), call_kwargs("flux")
    with torch.random.fork_rng(devices=[]), caplog.at_level(logging.INFO, logger=LOGGER):
        first, _ = _on_default_generator(pipe, kwargs)
        for _ in range(CALLS):
            plain, after_plain = _on_default_generator(pipe, kwargs)
            enable(pipe)
            try:
                enabled, after_enabled = _on_default_generator(pipe, kwargs)
            finally:
                disable(pipe)
            assert_outputs_bitwise_equal(plain, enabled)
            assert_outputs_bitwise_equal(first, enabled)  # same seed, same image, every call
            assert torch.equal(after_plain, after_enabled)
    assert [(r.overlapped, r.reason, r.served) for r in reports] == [(False, REASON, 0)] * CALLS
    assert worker_first.queues_started == 0  # nothing was drawn on a worker
    assert _warnings(caplog) == [WARNING]  # once for the class and reason, never "active"


def test_a_generator_list_holding_the_default_generator_runs_the_plain_call(
    tiny: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pipe, kwargs = tiny("flux_dropout"), call_kwargs("flux", 2)
    outputs, states = [], []
    with torch.random.fork_rng(devices=[]), caplog.at_level(logging.WARNING, logger=LOGGER):
        for run in (pipe, lambda **kw: call_module.overlapped_call_with_report(pipe, **kw)):
            private = generators([3])[0]
            output = run(generator=[private, torch.manual_seed(4)], **kwargs)
            outputs.append(output)
            states.append((private.get_state(), torch.get_rng_state()))
    plain, (enabled, report) = outputs
    assert not report.overlapped and report.reason == REASON
    assert output_tensor(plain).shape[0] == 2
    assert_outputs_bitwise_equal(plain, enabled)
    for a, b in zip(*states, strict=True):
        assert torch.equal(a, b)
    assert _warnings(caplog) == [WARNING]


def test_a_private_generator_still_overlaps_while_the_encoder_draws_the_global_rng(
    tiny: Any,
) -> None:
    """The worker draws the private generator while dropout draws the global RNG, in parallel:
    neither stream is touched by the other thread."""
    pipe, kwargs = tiny("flux_dropout"), call_kwargs("flux")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        untouched = torch.get_rng_state()
        for _ in range(CALLS):
            torch.manual_seed(7)
            pg, og = generators([0]), generators([0])
            plain = pipe(generator=pg[0], **kwargs)
            after_plain = torch.get_rng_state()
            torch.manual_seed(7)
            overlapped, report = call_module.overlapped_call_with_report(
                pipe, generator=og[0], **kwargs
            )
            after_overlapped = torch.get_rng_state()
            assert report.overlapped and report.served == 1 and report.left_plan is None
            assert_outputs_bitwise_equal(plain, overlapped)
            assert_same_states(pg, og)
            assert torch.equal(after_plain, after_overlapped)
            assert not torch.equal(after_plain, untouched)  # the dropout did draw from it


@pytest.mark.parametrize("name", PIPELINES)
def test_no_pipeline_draws_a_planned_generator_itself_before_its_planned_draws(
    tiny: Any, worker_first: WorkerFirst, name: str
) -> None:
    """With every prepared draw made before the call starts, the output is still the plain
    call's: no supported pipeline hands the caller's generator to code that draws from it
    directly (not through `randn_tensor`) before its last planned draw. Its other uses of it
    are planned in call order (the image-to-video VAE posterior samples, `retrieve_latents`
    with the generator, come first in the plans) or come after the planned draws."""
    pipe = tiny(name)
    plain, overlapped, report, pg, og = both_arms(pipe, call_kwargs(name), [11])
    assert report.overlapped and report.served == len(report.planned)
    assert worker_first.queues_started == 1
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_a_direct_draw_during_encoding_is_caught_by_the_state_check(
    tiny: Any, worker_first: WorkerFirst, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An encoder drawing the caller's generator directly (here a `torch.randn` on it during
    prompt encoding), with every prepared draw made before the call starts: the draws were made
    on clones, so the generator is not where the plan drew from, nothing is served and the
    output is the plain one (before the core drew on clones, this changed the output)."""
    pipe, kwargs = tiny("wan21"), call_kwargs("wan21")
    encode = pipe.encode_prompt
    current: list[torch.Generator] = []

    def encode_drawing_the_generator(*args: Any, **kw: Any) -> Any:
        torch.randn(16, generator=current[-1])
        return encode(*args, **kw)

    monkeypatch.setattr(pipe, "encode_prompt", encode_drawing_the_generator)
    pg, og = generators([12]), generators([12])
    current.append(pg[0])
    plain = pipe(generator=pg[0], **kwargs)
    current.append(og[0])
    overlapped, report = call_module.overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert report.overlapped and report.served == 0 and worker_first.queues_started == 1
    assert report.left_plan == (
        "the generator moved since the draws were planned (before 'noise'): something else "
        "drew from it"
    )
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
