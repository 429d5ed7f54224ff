"""What a diffusers user meets: pickling an enabled pipe, wrong arguments, visible messages, and
`CallReport` counting prenoise's own set-up and teardown."""

from __future__ import annotations

import copy
import logging
import pickle
import time
from typing import Any

import pytest

pytest.importorskip("diffusers")

import torch
from diffusers_tiny import assert_bitwise_equal, call_kwargs, generators, output_tensor

import prenoise.integrations.diffusers.call as call_module
from prenoise.integrations.diffusers import (
    disable,
    enable,
    is_enabled,
    original_class,
    overlapped_call,
    overlapped_call_with_report,
)
from prenoise.preparation.executor import PreparationExecutor

LOGGER = "prenoise.integrations.diffusers"


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


# -- pickling -------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_an_enabled_pipe_pickles_and_loads_enabled(
    tiny: Any, protocol: int, caplog: pytest.LogCaptureFixture
) -> None:
    pipe = tiny("flux")
    cls = type(pipe)
    enable(pipe)
    try:
        enabled_type = type(pipe)
        blob = pickle.dumps(pipe, protocol=protocol)
        copied = copy.deepcopy(pipe)
    finally:
        disable(pipe)
    restored = pickle.loads(blob)
    for clone in (restored, copied):
        assert type(clone) is enabled_type and original_class(clone) is cls
        assert is_enabled(clone) and clone is not pipe
    assert type(pickle.loads(pickle.dumps(restored, protocol=protocol))) is enabled_type
    assert type(pickle.loads(pickle.dumps(pipe, protocol=protocol))) is cls  # disabled: plain

    pg, og = generators([5]), generators([5])
    plain = pipe(generator=pg[0], **call_kwargs("flux"))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        out = restored(generator=og[0], **call_kwargs("flux"))  # through overlapped_call
    assert _messages(caplog, logging.INFO) == [
        "prenoise: FluxPipeline: overlapped noise active (prepared draws: noise)"
    ]
    assert_bitwise_equal(output_tensor(plain), output_tensor(out))
    assert torch.equal(pg[0].get_state(), og[0].get_state())


# -- wrong arguments ------------------------------------------------------------------------------


def test_enable_and_friends_say_what_to_pass(tiny: Any) -> None:
    pipe = tiny("flux")
    cls = type(pipe)
    instance = "takes a diffusers pipeline instance \\(a diffusers.DiffusionPipeline"
    for bad, message in (
        (None, f"enable\\(\\) {instance}.*got None"),
        (3, f"enable\\(\\) {instance}.*got a builtins.int"),
        (torch.nn.Linear(1, 1), "got a torch.nn.modules.linear.Linear"),
        (cls, "not the class FluxPipeline: .*pipe = FluxPipeline.from_pretrained"),
    ):
        with pytest.raises(TypeError, match=message):
            enable(bad)
    assert type(pipe) is cls and not is_enabled(pipe)
    with pytest.raises(TypeError, match="disable\\(\\) takes a diffusers pipeline instance"):
        disable(None)
    with pytest.raises(TypeError, match="overlapped_call\\(\\) takes a pipeline instance, not"):
        overlapped_call(cls, prompt="a cat")
    with pytest.raises(TypeError, match="overlapped_call\\(\\) takes a diffusers pipeline"):
        overlapped_call_with_report(None)


# -- messages a user sees -------------------------------------------------------------------------


def test_fall_backs_warn_once_per_reason_and_active_overlap_is_said_once(
    tiny: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pipe, kwargs = tiny("flux"), call_kwargs("flux")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        for _ in range(2):
            with torch.random.fork_rng(devices=[]):
                assert not overlapped_call_with_report(pipe, generator=None, **kwargs)[1].overlapped
            _, report = overlapped_call_with_report(pipe, generator=generators([1])[0], **kwargs)
            assert report.overlapped
    assert _messages(caplog, logging.WARNING) == [
        "prenoise: FluxPipeline: noise not overlapped, plain call (generator is None: noise "
        'comes from the device RNG); pass generator=torch.Generator("cpu").manual_seed(seed) '
        "to overlap it"
    ]
    assert _messages(caplog, logging.INFO) == [
        "prenoise: FluxPipeline: overlapped noise active (prepared draws: noise)"
    ]


# -- CallReport: prenoise's own time on the request thread ----------------------------------------


class _SlowExecutor(PreparationExecutor):
    """An executor whose start and exit each take at least `DELAY` seconds more."""

    DELAY = 0.05

    def __enter__(self) -> _SlowExecutor:
        time.sleep(self.DELAY)
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        time.sleep(self.DELAY)


def test_call_report_counts_executor_setup_and_teardown(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(call_module, "PreparationExecutor", _SlowExecutor)
    pipe, kwargs = tiny("flux"), call_kwargs("flux")
    forward = pipe.transformer.forward
    denoising: list[float] = []  # when the pipeline's own work (its transformer) began and ended

    def timed_forward(*args: Any, **kw: Any) -> Any:
        denoising.append(time.perf_counter())
        time.sleep(_SlowExecutor.DELAY)  # the pipeline's own time, not prenoise's
        try:
            return forward(*args, **kw)
        finally:
            denoising.append(time.perf_counter())

    pipe.transformer.forward = timed_forward
    try:
        start = time.perf_counter()
        _, report = overlapped_call_with_report(pipe, generator=generators([2])[0], **kwargs)
        elapsed = time.perf_counter() - start
    finally:
        del pipe.transformer.forward
    assert report.overlapped and report.served == 1
    assert report.setup_s >= _SlowExecutor.DELAY and report.teardown_s >= _SlowExecutor.DELAY
    assert report.overhead_s == report.setup_s + report.wait_s + report.teardown_s
    # the pipeline's own call is not counted: the overhead and the transformer's time are
    # disjoint parts of the call (the same clock, whatever the machine's speed)
    assert len(denoising) >= 2
    assert report.overhead_s + (denoising[-1] - denoising[0]) <= elapsed

    with torch.random.fork_rng(devices=[]):
        _, plain = overlapped_call_with_report(pipe, generator=None, **kwargs)
    assert not plain.overlapped and plain.setup_s > 0  # planning, up to the refusal
    assert plain.wait_s == plain.teardown_s == 0.0
