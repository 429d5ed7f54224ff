"""MiniMax-H3 rollout noise drawn one step ahead, plugin on vs off, through upstream's real
stages (SGLang 0.5.23): a t2va rollout request -> latent, timestep and denoising stages with a
fake DiT. Compared as bytes (a NaN's bytes as they are): every DiT input at every step, the
outputs, every tensor of `batch.extra`, the rollout trajectory's latents, timesteps, sigmas and
log-probs, the rollout generator's final state and the global RNG.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import torch
from _h3_harness import FakeH3DiT, fingerprint
from _h3_rollout_harness import (
    differing,
    rollout_contexts,
    rollout_request,
    run_rollout,
    worker_draws,
)

from prenoise.integrations.sglang import h3_rollout, plugin, reviewed, support
from prenoise.preparation.lookahead import StepLookahead


@pytest.fixture
def loops() -> Any:
    """Every rollout loop that ended while the test ran."""
    seen: list[h3_rollout.RolloutLoop] = []
    h3_rollout.loop_observers.append(seen.append)
    yield seen
    h3_rollout.loop_observers.remove(seen.append)


def both_arms(
    h3: Any, monkeypatch: pytest.MonkeyPatch, seed: int, **request: Any
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Plugin off, then on (the same global RNG state before each); the on arm's worker
    draws' thread names. The global RNG state after each arm is compared as a field."""
    start = torch.get_rng_state()
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run_rollout(h3, rollout_request(h3, seed, **request), monkeypatch)
    off["global_rng"] = (0, 0, 0, 0, torch.get_rng_state())
    torch.set_rng_state(start)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    with worker_draws(monkeypatch) as threads:
        on = run_rollout(h3, rollout_request(h3, seed, **request), monkeypatch)
    on["global_rng"] = (0, 0, 0, 0, torch.get_rng_state())
    assert torch.equal(on["global_rng"][4], start)
    return off, on, threads


def stochastic(steps: int, sde_type: str, sde_steps: list[int] | None, level: float) -> int:
    if sde_type == "ode" or level == 0.0:
        return 0
    return sum(sde_steps is None or s in sde_steps for s in range(steps))


@pytest.mark.parametrize(
    ("sde_type", "sde_steps", "level"),
    [
        ("cps", None, 0.7),
        ("cps", [0, 1, 2], 0.7),
        ("sde", [1, 3, 4], 0.5),
        ("cps", [2], 0.7),
        ("ode", None, 0.7),
        ("cps", None, 0.0),
    ],
)
def test_rollout_plugin_on_equals_off(
    h3: Any,
    monkeypatch: pytest.MonkeyPatch,
    loops: list[h3_rollout.RolloutLoop],
    sde_type: str,
    sde_steps: list[int] | None,
    level: float,
) -> None:
    request = {"steps": 6, "sde_type": sde_type, "sde_steps": sde_steps, "noise_level": level}
    off, on, threads = both_arms(h3, monkeypatch, 3, **request)
    assert len(off) > 20 and "rollout.log_probs" in off and "rollout.latents" in off
    assert differing(off, on) == []
    (loop,) = loops
    draws = stochastic(6, sde_type, sde_steps, level)
    assert loop.drawn == draws
    # every draw was served, the first one too, drawn on prenoise's rollout worker
    assert loop.served == draws and loop.left is None and loop.first_ahead is (draws > 0)
    assert len(threads) == draws
    assert all(t.startswith(h3_rollout.EXECUTOR_NAME) for t in threads)
    assert threading.current_thread().name not in threads
    alive = [t.name for t in threading.enumerate() if t.name.startswith(h3_rollout.EXECUTOR_NAME)]
    assert alive == []


def test_sde_nan_at_step_zero_is_upstreams_in_both_arms(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    """H3 `sde` with step 0 stochastic: upstream divides by 1 - sigma_max = 0 (its own defect),
    the stage's output check raises on the NaN latents. Both arms raise the same error, and what
    the loop left — every trajectory latent and log-prob (NaN bytes included), the last noise,
    the generator's state — is the same bytes; the worker is joined."""
    from sglang.multimodal_gen.runtime.pipelines_core.stages.base import StageVerificationError

    arms = []
    for setting in ("0", "1"):
        monkeypatch.setenv(plugin.ENABLE_ENV, setting)
        with rollout_contexts() as contexts, pytest.raises(StageVerificationError):
            run_rollout(h3, rollout_request(h3, 3, steps=6, sde_type="sde"), monkeypatch)
        (ctx,) = contexts
        collector = ctx.collector
        fields = {f"latent[{i}]": fingerprint(t) for i, t in enumerate(collector.latent_steps)}
        fields |= {f"log_prob[{i}]": fingerprint(t) for i, t in enumerate(collector.log_prob_sums)}
        fields["noise"] = fingerprint(ctx.noise_buffer)
        fields["generator"] = fingerprint(ctx.generator.get_state())
        arms.append(fields)
    off, on = arms
    assert len(off) == 2 * 6 + 3 and differing(off, on) == []
    assert torch.isnan(off["log_prob[0]"][4].view(torch.float32)).all()  # upstream's NaN, kept
    (loop,) = loops
    assert loop.drawn == 6 and loop.served == 6 and loop.first_ahead
    alive = [t.name for t in threading.enumerate() if t.name.startswith(h3_rollout.EXECUTOR_NAME)]
    assert alive == []


def test_served_noise_is_the_plain_draws(h3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The noise of the last stochastic step is the sixth consecutive `randn` of the request
    seed's generator (the same call every step makes)."""
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    on = run_rollout(h3, rollout_request(h3, 12, steps=6), monkeypatch)
    generator = torch.Generator().manual_seed(12)
    shape = on["noise_buffer"].shape
    expected = [torch.randn(shape, generator=generator, dtype=torch.float32) for _ in range(6)]
    assert torch.equal(on["noise_buffer"], expected[-1])
    assert torch.equal(on["generator"].get_state(), generator.get_state())


class DrawingDiT(FakeH3DiT):
    """A DiT that draws from the rollout generator at one step (a step callback's place):
    the generator state changes between two rollout draws."""

    def __init__(self, video: int, audio: int, contexts: list[Any], at: int) -> None:
        super().__init__(video, audio)
        self.contexts, self.at = contexts, at

    def forward(self, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if len(self.inputs) == self.at:
            torch.randn(5, generator=self.contexts[0].generator)
        return super().forward(**kwargs)


def test_generator_used_between_steps_ends_lookahead_bitwise(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    def dit(video: int, audio: int, contexts: list[Any]) -> FakeH3DiT:
        return DrawingDiT(video, audio, contexts, at=3)

    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run_rollout(h3, rollout_request(h3, 4, steps=6), monkeypatch, dit=dit)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    on = run_rollout(h3, rollout_request(h3, 4, steps=6), monkeypatch, dit=dit)
    assert differing(off, on) == []
    (loop,) = loops
    assert loop.served == 3 and loop.drawn == 6  # steps 0, 1, 2 served; 3.. plain
    assert loop.left is not None and "generator changed" in loop.left


def test_broken_state_check_is_caught(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    """Breaking the core's state check on purpose (a served draw whatever the generator's
    state) makes the comparison above fail: the test can see a wrong bit."""

    def unchecked(self: StepLookahead, plain: Any, device: Any) -> Any:
        prepared = self._jobs.pop(0)
        tensor = self._executor.take(prepared.job)
        assert self._generator is not None and prepared.after is not None
        self._generator.set_state(prepared.after)
        self.served += 1
        if self._to_submit > 0:
            self._submit_locked()
        return tensor

    def dit(video: int, audio: int, contexts: list[Any]) -> FakeH3DiT:
        return DrawingDiT(video, audio, contexts, at=3)

    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run_rollout(h3, rollout_request(h3, 4, steps=6), monkeypatch, dit=dit)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setattr(StepLookahead, "_take_locked", unchecked)
    on = run_rollout(h3, rollout_request(h3, 4, steps=6), monkeypatch, dit=dit)
    assert "rollout.log_probs" in differing(off, on)
    assert "generator.final_state" in differing(off, on)


def _first_unchecked(
    self: StepLookahead, shape: Any, generator: torch.Generator, dtype: Any, device: Any
) -> Any:
    """`StepLookahead._take_first_locked` without its state check (broken on purpose)."""
    guess, self._first = self._first, None
    if guess is None or guess.shape != shape:
        return None
    self._executor.take(guess.job)
    tensor, after = guess.drawn[dtype]
    generator.set_state(after)
    self.served += 1
    self.first_ahead = True
    return tensor


@pytest.mark.parametrize("broken", [False, True])
def test_first_draw_is_served_only_on_the_seeded_state(
    h3: Any,
    monkeypatch: pytest.MonkeyPatch,
    loops: list[h3_rollout.RolloutLoop],
    broken: bool,
) -> None:
    """The DiT draws from the rollout generator before the loop's first update (a step
    callback's place): the generator is no longer in the seeded state the first draw was
    prepared from, so it is not served (the plain draw runs; later steps are still served).
    With the state check broken on purpose, the comparison catches the wrong bits."""

    def dit(video: int, audio: int, contexts: list[Any]) -> FakeH3DiT:
        return DrawingDiT(video, audio, contexts, at=0)

    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run_rollout(h3, rollout_request(h3, 5, steps=6), monkeypatch, dit=dit)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    if broken:
        monkeypatch.setattr(StepLookahead, "_take_first_locked", _first_unchecked)
    on = run_rollout(h3, rollout_request(h3, 5, steps=6), monkeypatch, dit=dit)
    (loop,) = loops
    if broken:
        assert "rollout.log_probs" in differing(off, on)
        return
    assert differing(off, on) == []
    assert not loop.first_ahead and loop.served == 5 and loop.drawn == 6 and loop.left is None


def test_first_draw_from_another_seed_is_not_served(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    """A first draw predicted from another seed than the loop's (forced): its start state is
    not the generator's, so the plain draw runs; every bit as upstream's."""
    real = h3_rollout.first_draw

    def wrong_seed(batch: Any, stream: str) -> Any:
        first, why = real(batch, stream)
        assert first is not None, why
        return (first[0], first[1] + 1), why

    monkeypatch.setattr(h3_rollout, "first_draw", wrong_seed)
    off, on, threads = both_arms(h3, monkeypatch, 9, steps=4)
    assert differing(off, on) == []
    (loop,) = loops
    assert not loop.first_ahead and loop.served == 3 and loop.drawn == 4
    assert len(threads) == 4  # the unserved guess ran on the worker too, then was dropped


def test_first_draw_is_not_prepared_for_a_device_loop(
    h3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Native stream, a non-CPU platform device: the generator will not be a CPU one, so the
    first draw is not prepared (it could never be served); a named stream prepares it (its
    CPU stand-in is seeded with the same seed)."""
    from sglang.multimodal_gen.runtime.platforms import current_platform

    req = rollout_request(h3, 3)
    req.extra["minimax_h3_denoise_state"] = {"initial_video_rows": torch.zeros(7, 96)}
    assert h3_rollout.first_draw(req, "native") == (((7, 96), 3), "")
    monkeypatch.setattr(
        type(current_platform), "get_local_torch_device", classmethod(lambda _c: "cuda:0")
    )
    first, why = h3_rollout.first_draw(req, "native")
    assert first is None and "cuda generator" in why
    assert h3_rollout.first_draw(req, "x86") == (((7, 96), 3), "")


def test_failing_loop_joins_the_worker(h3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing(FakeH3DiT):
        def forward(self, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if len(self.inputs) == 2:
                raise RuntimeError("DiT failed")
            return super().forward(**kwargs)

    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    with pytest.raises(RuntimeError, match="DiT failed"):
        run_rollout(
            h3,
            rollout_request(h3, 8, steps=6),
            monkeypatch,
            dit=lambda v, a, _c: Failing(v, a),
        )
    alive = [t.name for t in threading.enumerate() if t.name.startswith(h3_rollout.EXECUTOR_NAME)]
    assert alive == []


def test_unknown_step_count_serves_nothing(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    """Where upstream's rule cannot be evaluated ahead, nothing is prepared and `left` says
    why; the loop's draws are the plain ones."""
    monkeypatch.setattr(
        h3_rollout, "expected_draws", lambda _batch: (None, "the steps cannot be told")
    )
    off, on, threads = both_arms(h3, monkeypatch, 6, steps=5)
    assert differing(off, on) == [] and threads == []
    (loop,) = loops
    assert loop.served == 0 and loop.left == "the steps cannot be told"


def test_device_generator_in_native_stream_is_untouched(
    h3: Any, monkeypatch: pytest.MonkeyPatch, loops: list[h3_rollout.RolloutLoop]
) -> None:
    """A non-CPU generator (simulated: upstream's call is made with a generator whose device
    reads `cuda`) in the native stream: the mode is not entered, nothing is prepared."""
    calls: list[Any] = []

    class DeviceLike:
        device = torch.device("cuda")

    loop = h3_rollout.RolloutLoop(object())
    assert loop.generator_for(DeviceLike()) is None  # type: ignore[arg-type]

    def original(*args: Any, **kwargs: Any) -> Any:
        calls.append(torch.overrides._get_current_function_mode_stack())
        return None

    with h3_rollout.open_loop("batch", "native"):
        h3_rollout.update(original, "native", (1, 2), {"batch": "batch", "generator": None})
    assert calls == [[]]


def test_changed_rollout_digest_turns_only_that_path_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, h3: Any
) -> None:
    key = next(k for k in reviewed.REVIEWED if k.endswith(":_effective_sde_type"))
    monkeypatch.setitem(reviewed.REVIEWED, key, {"000000000000": ("0.5.23",)})
    monkeypatch.setattr(plugin, "_said", set())
    support.reset()
    registered: list[str] = []
    monkeypatch.setattr(
        h3.plugins.HookRegistry,
        "register",
        classmethod(lambda _cls, target, _hook, _type: registered.append(target)),
    )
    try:
        with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
            plugin.register()
        lines = [r for r in caplog.records if r.name == "prenoise.sglang"]
        warnings = [r for r in lines if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert reviewed.H3_ROLLOUT_PATH in warnings[0].getMessage()
        assert "_effective_sde_type" in warnings[0].getMessage()
        assert "rollout noise: upstream's draws" in lines[-1].getMessage()
        assert not any(t.endswith("minimax_h3_rollout_update_video_target") for t in registered)
        assert support.current().runs(reviewed.H3_CONDITIONS_PATH)
    finally:
        monkeypatch.undo()
        support.reset()


def test_register_line_says_rollout_noise(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, h3: Any
) -> None:
    monkeypatch.setattr(plugin, "_said", set())
    monkeypatch.setattr(h3.plugins.HookRegistry, "register", classmethod(lambda *_a: None))
    with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
        plugin.register()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "prenoise.sglang"]
    assert "rollout noise: CPU generators one step ahead" in line
    assert "noise stream: native" in line


def test_noise_record_names_each_stochastic_step(
    h3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """`PRENOISE_NOISE_RECORD` set: one record per stochastic step (site `h3.rollout`, the
    generator's seed, the loop step, the digest of that step's noise, the request's stable
    record name); nothing else changes."""
    import json

    from prenoise.observe import noise_record

    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run_rollout(h3, rollout_request(h3, 14, steps=5, sde_steps=[0, 2, 3]), monkeypatch)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setenv(noise_record.RECORD_ENV, str(tmp_path))
    req = rollout_request(h3, 14, steps=5, sde_steps=[0, 2, 3])
    req.request_id = "rollout-14"
    on = run_rollout(h3, req, monkeypatch)
    monkeypatch.delenv(noise_record.RECORD_ENV)
    assert differing(off, on) == []
    lines = [json.loads(line) for f in tmp_path.iterdir() for line in f.read_text().splitlines()]
    lines = [r for r in lines if r["site"] == "h3.rollout"]  # (h3.initial.*: test_h3_noise_records)
    assert [(r["engine"], r["site"], r["seed"], r["step"]) for r in lines] == [
        ("sglang", "h3.rollout", 14, step) for step in (0, 2, 3)
    ]
    assert {r["request"] for r in lines} == {"sglang#0"}  # a stable name, not the request id
    generator = torch.Generator().manual_seed(14)
    shape = on["noise_buffer"].shape
    digests = [noise_record.noise_digest(torch.randn(shape, generator=generator)) for _ in "abc"]
    assert [r["digest"] for r in lines] == digests
