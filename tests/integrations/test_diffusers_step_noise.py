"""Per-step sampler noise drawn ahead (`step_noise.StepLookahead`), bitwise, on tiny CogVideoX
pipelines with each stochastic scheduler they can be given.

CogVideoX hands the caller's generator to `scheduler.step` (`prepare_extra_step_kwargs`), so a
stochastic scheduler draws the whole latent from it at every step. Each test compares the plain
call and `overlapped_call_with_report` on fresh generators (`both_arms`: outputs bit for bit,
generator states, the global RNG untouched, every served draw a worker job that started before
the pipeline asked for it).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import pytest
import torch

pytest.importorskip("diffusers")

from diffusers_tiny import (
    assert_outputs_bitwise_equal,
    assert_same_states,
    both_arms,
    call_kwargs,
    generators,
    output_tensor,
)

from prenoise.integrations.diffusers import (
    disable,
    enable,
    overlapped_call_with_report,
    step_noise,
)
from prenoise.integrations.diffusers.step_noise import LookaheadLimits, expected_step_draws
from prenoise.preparation.served import ServedDraws

SCHEDULER_CLASSES: dict[str, tuple[str, dict[str, Any]]] = {
    "dpm_cogvideox": ("CogVideoXDPMScheduler", {}),
    "ddim": ("DDIMScheduler", {}),
    "euler_ancestral": ("EulerAncestralDiscreteScheduler", {}),
    "dpm_sde": ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"}),
    "ddpm": ("DDPMScheduler", {}),
    "lcm": ("LCMScheduler", {}),
    "tcd": ("TCDScheduler", {}),
    "dpm_singlestep_sde": (
        "DPMSolverSinglestepScheduler",
        {"algorithm_type": "sde-dpmsolver++", "solver_order": 2},
    ),
}
SCHEDULERS = list(SCHEDULER_CLASSES)


def _scheduler(name: str, base: Any) -> Any:
    import diffusers

    class_name, overrides = SCHEDULER_CLASSES[name]
    return getattr(diffusers, class_name).from_config(base.config, **overrides)


@pytest.fixture
def cogvideox(tiny: Any) -> Any:
    pipe = tiny("cogvideox")
    original = pipe.scheduler
    yield pipe
    pipe.scheduler = original


def _kwargs(steps: int, scheduler: str = "dpm_cogvideox", **extra: Any) -> dict[str, Any]:
    kwargs = {**call_kwargs("cogvideox"), "num_inference_steps": steps, **extra}
    if scheduler in ("ddim", "tcd"):
        kwargs["eta"] = 0.7  # DDIM and TCD draw noise only with eta > 0
    return kwargs


@pytest.mark.parametrize("steps", [1, 2, 5])
@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_per_step_draws_are_served_ahead_bitwise(
    cogvideox: Any, scheduler: str, steps: int
) -> None:
    cogvideox.scheduler = _scheduler(scheduler, cogvideox.scheduler)
    plain, overlapped, report, pg, og = both_arms(cogvideox, _kwargs(steps, scheduler), [3], False)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    expected = expected_step_draws(cogvideox.scheduler)
    assert expected is not None
    # every per-step draw was prepared on the worker, the first one right after the noise
    assert report.step_first_ahead is (expected > 0) and report.step_served == expected
    if steps == 5:
        assert report.step_served >= 3
    assert report.step_unused == 0 and report.step_left is None


@pytest.mark.parametrize("seed", [0, 4242])
def test_many_steps_dpm_cogvideox(cogvideox: Any, seed: int) -> None:
    """CogVideoX-5B's own scheduler: two draws per step after the first, 12 steps."""
    plain, overlapped, report, pg, og = both_arms(cogvideox, _kwargs(12), [seed], False)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert report.step_served == 2 * 12 - 2


def _callback_arms(pipe: Any, kwargs: dict[str, Any], make_callback: Any) -> Any:
    """Both arms with a `callback_on_step_end` built per arm from its generator."""
    pg, og = generators([9]), generators([9])
    plain = pipe(generator=pg[0], callback_on_step_end=make_callback(pg[0]), **kwargs)
    overlapped, report = overlapped_call_with_report(
        pipe, generator=og[0], callback_on_step_end=make_callback(og[0]), **kwargs
    )
    return plain, overlapped, report, pg, og


def test_a_callback_drawing_from_the_generator_ends_the_look_ahead(cogvideox: Any) -> None:
    def make_callback(generator: torch.Generator) -> Any:
        def callback(pipe: Any, step: int, timestep: Any, tensors: dict[str, Any]) -> Any:
            if step == 2:
                torch.randn(3, generator=generator)  # the generator moves between two steps
            return tensors

        return callback

    plain, overlapped, report, pg, og = _callback_arms(cogvideox, _kwargs(6), make_callback)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert report.step_left is not None and "generator changed" in report.step_left
    assert 0 < report.step_served < 2 * 6 - 2
    assert report.step_unused >= 1


def test_an_interrupt_mid_loop_leaves_the_generator_where_the_plain_call_does(
    cogvideox: Any,
) -> None:
    def make_callback(generator: torch.Generator) -> Any:
        del generator

        def callback(pipe: Any, step: int, timestep: Any, tensors: dict[str, Any]) -> Any:
            if step == 1:
                pipe._interrupt = True
            return tensors

        return callback

    kwargs = _kwargs(8, output_type="latent")
    plain, overlapped, report, pg, og = _callback_arms(cogvideox, kwargs, make_callback)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert report.step_left is not None and "ended before" in report.step_left


def test_an_exception_mid_loop_is_the_plain_calls_and_joins_the_worker(cogvideox: Any) -> None:
    class Stop(Exception):
        pass

    def callback(pipe: Any, step: int, timestep: Any, tensors: dict[str, Any]) -> Any:
        if step == 2:
            raise Stop("from the callback")
        return tensors

    pg, og = generators([5]), generators([5])
    kwargs = _kwargs(6)
    with pytest.raises(Stop):
        cogvideox(generator=pg[0], callback_on_step_end=callback, **kwargs)
    with pytest.raises(Stop, match="from the callback"):
        overlapped_call_with_report(
            cogvideox, generator=og[0], callback_on_step_end=callback, **kwargs
        )
    assert_same_states(pg, og)
    import threading

    assert not [t for t in threading.enumerate() if t.name.startswith("prenoise-diffusers")]


def test_a_generator_list_is_not_looked_ahead(tiny: Any) -> None:
    """Two prompts on two generators: the scheduler draws per sample; left plain."""
    pipe = tiny("cogvideox")
    kwargs = {**call_kwargs("cogvideox", 2), "num_inference_steps": 4}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [1, 2], True)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert report.step_served == 0 and report.step_left is not None
    assert "2 generators" in report.step_left


def test_limits_bound_the_draws_waiting_and_zero_turns_it_off(
    cogvideox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting: list[int] = []
    real_submit = step_noise.StepLookahead._submit_locked

    def submit(self: Any) -> None:
        real_submit(self)
        waiting.append(len(self._jobs))

    monkeypatch.setattr(step_noise.StepLookahead, "_submit_locked", submit)
    kwargs = _kwargs(6)
    plain = output_tensor(cogvideox(generator=generators([2])[0], **kwargs))
    try:
        for limits, most in ((dict(steps_ahead=2), 2), (dict(bytes_ahead=1), 1)):
            waiting.clear()
            enable(cogvideox, **limits)
            assert torch.equal(
                output_tensor(cogvideox(generator=generators([2])[0], **kwargs)), plain
            )
            assert waiting and max(waiting) == most, (limits, waiting)
        enable(cogvideox, steps_ahead=0)
        waiting.clear()
        _, report = overlapped_call_with_report(cogvideox, generator=generators([2])[0], **kwargs)
        assert waiting == [] and report.step_served == 0
        with pytest.raises(ValueError, match=">= 0"):
            enable(cogvideox, steps_ahead=-1)
    finally:
        disable(cogvideox)
    assert step_noise.lookahead_limits_of(cogvideox) == LookaheadLimits()


def test_a_perturbed_per_step_draw_is_caught(
    cogvideox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison these tests rely on sees one flipped bit in one per-step draw."""
    real_run = step_noise.StepLookahead._run

    def run(self: Any, prepared: Any) -> torch.Tensor:
        tensor = real_run(self, prepared)
        if prepared.job == "step:2":
            tensor.view(-1)[0] *= -1  # its sign bit: one bit of one draw
        return tensor

    monkeypatch.setattr(step_noise.StepLookahead, "_run", run)
    kwargs = _kwargs(4, output_type="latent")
    plain = cogvideox(generator=generators([6])[0], **kwargs)
    overlapped, report = overlapped_call_with_report(
        cogvideox, generator=generators([6])[0], **kwargs
    )
    assert report.step_served >= 2
    with pytest.raises(AssertionError):
        assert_outputs_bitwise_equal(plain, overlapped)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("stream", ["x86", "libm"])
def test_per_step_draws_in_a_named_stream(cogvideox: Any, stream: str, scheduler: str) -> None:
    """In a stream, the prepared per-step draws equal the stream's own draws on the request
    thread (the look-ahead off), per scheduler; x86 on an x86 host also equals local torch."""
    from prenoise.noise import streams as noise_streams

    cogvideox.scheduler = _scheduler(scheduler, cogvideox.scheduler)
    kwargs = _kwargs(5, scheduler)
    try:
        enable(cogvideox, stream=stream, steps_ahead=0)
        serial = output_tensor(cogvideox(generator=generators([8])[0], **kwargs))
        enable(cogvideox, stream=stream)
        gen = generators([8])[0]
        ahead, report = overlapped_call_with_report(cogvideox, generator=gen, **kwargs)
    finally:
        disable(cogvideox)
    assert report.stream == stream and report.step_served == expected_step_draws(
        cogvideox.scheduler
    )
    assert report.step_served >= 4 and report.step_first_ahead
    assert torch.equal(output_tensor(ahead).view(torch.uint8), serial.view(torch.uint8))
    native = output_tensor(cogvideox(generator=generators([8])[0], **kwargs))
    if stream == noise_streams.local_torch_stream():
        assert torch.equal(native.view(torch.uint8), serial.view(torch.uint8))


@pytest.mark.parametrize("steps", [1, 5])
def test_latte_with_ddim_eta(tiny: Any, steps: int) -> None:
    """Latte hands its generator to DDIM too: with `eta > 0` every step draws."""
    pipe = tiny("latte")
    kwargs = {**call_kwargs("latte"), "num_inference_steps": steps}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [12], False)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert report.step_served == steps and report.step_left is None


def test_allegro_with_its_euler_ancestral_scheduler(tiny: Any) -> None:
    """Allegro's released scheduler draws at every step, on the request's generator."""
    pipe = tiny("allegro")
    kwargs = {**call_kwargs("allegro"), "num_inference_steps": 6}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [13], False)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert report.step_served == 6 and report.step_left is None


def test_the_first_per_step_draw_is_prepared_only_when_the_call_will_make_it(
    cogvideox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DDIM with eta 0 draws nothing: no first draw is guessed (no wasted worker draw)."""
    guesses: list[Any] = []
    real = step_noise.StepLookahead.prepare_first

    def prepare_first(self: Any, *args: Any) -> None:
        guesses.append(args)
        real(self, *args)

    monkeypatch.setattr(step_noise.StepLookahead, "prepare_first", prepare_first)
    cogvideox.scheduler = _scheduler("ddim", cogvideox.scheduler)
    for eta, guessed in ((0.0, False), (0.7, True)):
        guesses.clear()
        kwargs = {**_kwargs(3, "ddim"), "eta": eta}
        plain, overlapped, report, pg, og = both_arms(cogvideox, kwargs, [4], False)
        assert_outputs_bitwise_equal(plain, overlapped)
        assert_same_states(pg, og)
        assert bool(guesses) is guessed and report.step_first_ahead is guessed
        assert report.step_served == (3 if guessed else 0)


def test_a_first_draw_guessed_in_another_dtype_is_dropped(
    cogvideox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A guess that misses the key: the first draw is the plain one, the look-ahead goes on."""
    real = step_noise.StepLookahead.prepare_first

    def in_float16(self: Any, shape: Any, generator: Any, dtypes: Any, *start: Any) -> None:
        real(self, shape, generator, (torch.float16,), *start)

    monkeypatch.setattr(step_noise.StepLookahead, "prepare_first", in_float16)
    plain, overlapped, report, pg, og = both_arms(cogvideox, _kwargs(4), [14], False)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert not report.step_first_ahead
    assert report.step_served == 2 * 4 - 2 - 1 and report.step_unused == 0


def test_a_generator_moved_before_the_first_step_draw_drops_the_guess(
    cogvideox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something draws from the generator after the noise and before the first per-step draw
    (here the scheduler's `scale_model_input`, once): the guessed draw started from the state
    before it, so it is not served; the plain first draw runs and the look-ahead follows it."""
    real_scale = cogvideox.scheduler.scale_model_input
    arm: dict[str, torch.Generator] = {}

    def scale_model_input(sample: Any, *args: Any, **kwargs: Any) -> Any:
        generator = arm.pop("generator", None)
        if generator is not None:
            torch.randn(5, generator=generator)
        return real_scale(sample, *args, **kwargs)

    monkeypatch.setattr(cogvideox.scheduler, "scale_model_input", scale_model_input)
    kwargs = _kwargs(4)
    pg, og = generators([15]), generators([15])
    arm["generator"] = pg[0]
    plain = cogvideox(generator=pg[0], **kwargs)
    arm["generator"] = og[0]
    overlapped, report = overlapped_call_with_report(cogvideox, generator=og[0], **kwargs)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert not report.step_first_ahead
    assert report.step_served == 2 * 4 - 2 - 1 and report.step_left is None


@pytest.mark.parametrize(
    ("class_name", "config", "eta", "draws"),
    [
        ("CogVideoXDPMScheduler", {}, None, True),
        ("EulerAncestralDiscreteScheduler", {}, None, True),
        ("DDPMScheduler", {}, None, True),
        ("LCMScheduler", {}, None, True),
        ("DDIMScheduler", {}, 0.0, False),
        ("DDIMScheduler", {}, 0.5, True),
        ("TCDScheduler", {}, 0.0, False),
        ("TCDScheduler", {}, 0.3, True),
        ("DPMSolverMultistepScheduler", {}, None, False),
        ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"}, None, True),
        (
            "DPMSolverMultistepScheduler",
            {"algorithm_type": "sde-dpmsolver", "final_sigmas_type": "sigma_min"},
            None,
            True,
        ),
        ("DPMSolverSinglestepScheduler", {}, None, False),
        ("DPMSolverSinglestepScheduler", {"algorithm_type": "sde-dpmsolver++"}, None, True),
        ("FlowMatchEulerDiscreteScheduler", {}, None, False),
        ("FlowMatchEulerDiscreteScheduler", {"stochastic_sampling": True}, None, True),
        ("FlowMatchLCMScheduler", {}, None, True),
        ("EulerDiscreteScheduler", {}, None, False),  # not in STEP_DRAWS
    ],
)
def test_draws_in_this_call_reads_the_scheduler_configuration(
    tiny: Any, class_name: str, config: dict[str, Any], eta: Any, draws: bool
) -> None:
    import diffusers

    scheduler = getattr(diffusers, class_name)(**config)
    assert step_noise.draws_in_this_call(tiny("cogvideox"), scheduler, eta) is draws
    # a pipeline that does not hand its generator to `scheduler.step` never draws on it there
    assert not step_noise.draws_in_this_call(tiny("wan21"), scheduler, eta)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_the_worker_draws_per_step_noise_at_the_lowest_priority(
    cogvideox: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-step jobs run at `WORKER_NICE`; the planned initial draw before them and the
    request thread keep their priority."""
    seen: dict[str, int] = {}

    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    real_run, real_first = step_noise.StepLookahead._run, step_noise.StepLookahead._run_first
    real_draw = ServedDraws._draw

    def run(self: Any, prepared: Any) -> torch.Tensor:
        tensor = real_run(self, prepared)
        seen[prepared.job] = niceness()
        return tensor

    def run_first(self: Any, guess: Any) -> None:
        real_first(self, guess)
        seen[guess.job] = niceness()

    def draw(self: Any, entry: Any) -> torch.Tensor:
        seen[entry.job] = niceness()
        return real_draw(self, entry)

    monkeypatch.setattr(step_noise.StepLookahead, "_run", run)
    monkeypatch.setattr(step_noise.StepLookahead, "_run_first", run_first)
    monkeypatch.setattr(ServedDraws, "_draw", draw)
    before = niceness()
    plain, overlapped, report, pg, og = both_arms(cogvideox, _kwargs(3), [16], False)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert niceness() == before
    assert seen.pop("0:noise") == before
    assert seen and set(seen.values()) == {max(step_noise.WORKER_NICE, before)}, seen
    assert report.step_served == len(seen) == 2 * 3 - 2


@pytest.mark.parametrize(
    ("shape", "dtype", "left"),
    [
        ((0, 4), torch.float32, "a zero-element per-step draw [0, 4]: nothing to prepare"),
        (
            (2, 3),
            torch.complex64,
            "a per-step draw the look-ahead cannot prepare: draw 'step_noise': dtype "
            "torch.complex64 is not a floating dtype",
        ),
    ],
)
def test_a_first_step_draw_the_lookahead_cannot_prepare_is_plain(
    shape: tuple[int, ...], dtype: torch.dtype, left: str
) -> None:
    """A zero-element or complex first per-step draw ends the look-ahead (it raised
    ZeroDivisionError / ValueError into the pipeline); the draws are the plain ones."""
    from diffusers import DDPMScheduler
    from diffusers.utils.torch_utils import randn_tensor

    from prenoise.integrations.diffusers.step_noise import LookaheadLimits, scheduler_lookahead
    from prenoise.preparation.executor import PreparationExecutor

    scheduler = DDPMScheduler()
    scheduler.set_timesteps(4)
    g, ref = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    with PreparationExecutor(name="step-test") as executor:
        lookahead = scheduler_lookahead(executor, scheduler, "native", LookaheadLimits())
        for _ in range(3):
            plain = lambda: randn_tensor(shape, generator=g, dtype=dtype)  # noqa: E731
            out = lookahead.serve(shape, (g,), dtype, None, None, plain)
            expected = randn_tensor(shape, generator=ref, dtype=dtype)
            real = torch.view_as_real if dtype.is_complex else (lambda t: t)
            assert torch.equal(real(out), real(expected))
        lookahead.finish()
    assert lookahead.left == left and lookahead.served == 0
    assert torch.equal(g.get_state(), ref.get_state())
