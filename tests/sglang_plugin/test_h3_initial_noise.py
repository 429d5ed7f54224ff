"""MiniMax-H3 initial noise, plugin on vs off, through upstream's real stages (SGLang 0.5.23).

A request runs: the plugin's `forward` hook (around a stand-in for the pipeline's stage list)
-> `MiniMaxH3LatentPreparationStage` -> `MiniMaxH3TimestepPreparationStage` ->
`MiniMaxH3DenoisingStage` with a tiny fake DiT. Compared bit for bit (integer views): every
tensor the Denoising stage receives (the batch's latents and every tensor in `batch.extra`),
every input the DiT gets at each step, the stage's outputs, and the global RNG state.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from prenoise.integrations.sglang import h3_initial, plugin, reviewed, support

STEPS = 3


class FakeH3DiT(torch.nn.Module):
    """What the H3 denoising stage calls (as in SGLang's own H3 harnesses): records its
    inputs and returns velocities that depend on them."""

    def __init__(self, target_rows: int, audio_rows: int) -> None:
        super().__init__()
        self.final_layer = SimpleNamespace(_pdd_heads=None)
        self._resolved_attention_backend = None
        self.target_rows, self.audio_rows = target_rows, audio_rows
        self.inputs: list[dict[str, torch.Tensor]] = []

    def _resolve_attention_backend_once(self) -> None:
        return None

    def prepare_adaln_plans(self, *_args: Any, **_kwargs: Any) -> None:
        return None

    def forward(self, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.inputs.append({k: v.clone() for k, v in kwargs.items() if torch.is_tensor(v)})
        x = kwargs["x"].float()
        video = x[0, : self.target_rows, :96] * 0.5 + x.mean()
        audio = torch.zeros(self.audio_rows, 32) + kwargs["audio_x"].float().mean()
        return video, audio


def tensors(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a nested dict/list/tuple/struct, with its path."""
    if torch.is_tensor(value):
        yield prefix, value
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from tensors(value[key], f"{prefix}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from tensors(item, f"{prefix}[{i}]")


def fingerprint(tensor: torch.Tensor) -> tuple[Any, ...]:
    """Shape, dtype, device, strides and the exact bytes (an integer view)."""
    data = tensor.detach().cpu().contiguous()
    raw = data.reshape(-1).view(torch.uint8) if data.numel() else data
    return (tuple(tensor.shape), tensor.dtype, tensor.device.type, tensor.stride(), raw.clone())


def same(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Names of fields that differ in anything (bytes included); [] when all are identical."""
    differ = sorted(set(a) ^ set(b))
    for name in sorted(set(a) & set(b) - {"served_ptrs"}):
        fa, fb = a[name], b[name]
        if fa[:4] != fb[:4] or not torch.equal(fa[4], fb[4]):
            differ.append(name)
    return differ


def make_request(h3: Any, seed: int, short_edge: int, duration: float) -> Any:
    """A t2va request as SGLang's HTTP process hands it to a worker (pre-queue plan shipped)."""
    sampling = h3.SamplingParams(
        prompt="a cat",
        task="t2va",
        seed=seed,
        target={"short_edge": short_edge, "aspect_ratio": "16:9", "duration_seconds": duration},
        num_inference_steps=STEPS,
    )
    req = h3.Req(sampling_params=sampling)
    sampling.apply_request_extra(req)
    h3.prepare_for_queue(req)
    req.generator = [torch.Generator("cpu").manual_seed(seed)]
    req.prompt_embeds = [torch.zeros(1, 4, 8)]
    req.extra["minimax_h3_text_embeddings"] = {
        "positive": {
            "hidden_states": torch.zeros(5, 5120, dtype=torch.bfloat16),
            "text_len": 5,
            "text_token_tags": torch.ones(5),
        }
    }
    return req


def run(
    h3: Any,
    req: Any,
    *,
    before_latents: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """One request through the plugin's forward hook and upstream's stages; every compared
    field (name -> fingerprint)."""
    fields: dict[str, Any] = {}
    served = fields.setdefault("served_ptrs", [])

    def stages(_pipeline: Any, batch: Any, sa: Any) -> Any:
        if before_latents is not None:
            before_latents(batch)  # the encoders' place in the stage list
        batch = h3.LatentStage()(batch, sa)
        batch = h3.TimestepStage()(batch, sa)
        state = batch.extra["minimax_h3_denoise_state"]
        served.extend(state[k].data_ptr() for k in ("initial_video_rows", "initial_audio_rows"))
        for name, t in tensors({"latents": batch.latents, "audio": batch.audio_latents}):
            fields[f"denoise_in{name}"] = fingerprint(t)
        for name, t in tensors(batch.extra):
            fields[f"denoise_in.extra{name}"] = fingerprint(t)
        ints = {k: v for k, v in state.items() if not torch.is_tensor(v)}
        assert all(type(v) is int for v in ints.values())
        names = ",".join(sorted(ints))
        fields[f"denoise_in.state[{names}]"] = fingerprint(
            torch.tensor([ints[k] for k in sorted(ints)])
        )
        dit = FakeH3DiT(state["initial_video_rows"].shape[0], state["initial_audio_rows"].shape[0])
        batch = h3.DenoisingStage(transformer=dit)(batch, sa)
        for step, inputs in enumerate(dit.inputs):
            for name, t in inputs.items():
                fields[f"dit[{step}].{name}"] = fingerprint(t)
        for name, t in tensors({"latents": batch.latents, "audio": batch.audio_latents}):
            fields[f"denoise_out{name}"] = fingerprint(t)
        return batch

    pipeline = object.__new__(h3.Pipeline)  # a MiniMax-H3 pipeline (no weights)
    plugin.around_forward(stages, pipeline, req, h3.SA)
    return fields


@contextlib.contextmanager
def recorded_draws() -> Iterator[list[tuple[str, int, str, int]]]:
    seen: list[tuple[str, int, str, int]] = []

    def observe(label: str, key: Any, thread: str, tensor: torch.Tensor) -> None:
        seen.append((label, key.seed, thread, tensor.data_ptr()))

    h3_initial.observers.append(observe)
    try:
        yield seen
    finally:
        h3_initial.observers.remove(observe)


def both_arms(
    h3: Any, monkeypatch: pytest.MonkeyPatch, seed: int, short_edge: int, duration: float
) -> tuple[dict[str, Any], dict[str, Any], list[Any], tuple[torch.Tensor, ...]]:
    start = torch.get_rng_state()
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run(h3, make_request(h3, seed, short_edge, duration))
    rng_off = torch.get_rng_state()
    torch.set_rng_state(start)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    with recorded_draws() as seen:
        on = run(h3, make_request(h3, seed, short_edge, duration))
    rng_on = torch.get_rng_state()
    return off, on, seen, (start, rng_off, rng_on)


def test_plugin_loaded_by_sglangs_loader(h3: Any) -> None:
    """The entry point ran and its hooks wrap upstream's functions (`apply_plugin_hooks`)."""
    forward = h3.ComposedPipelineBase.forward
    prepare = h3.LatentStage._prepare_denoise_state_from_plan
    assert getattr(forward, "__wrapped__", None) is not None
    assert getattr(prepare, "__wrapped__", None) is not None
    registered = {t for t, hooks in h3.plugins.HookRegistry._hooks.items()
                  for _type, hook, _src in hooks if hook.__module__ == plugin.__name__}  # fmt: skip
    assert registered == {target for target, _hook in plugin.HOOKS}
    assert support.current().h3_initial and support.current().release == "0.5.23"


@pytest.mark.parametrize(
    ("short_edge", "duration", "seeds"),
    [(64, 4.0, (0, 7, 2**63 - 1)), (128, 5.0, (42, 123456789))],
)
def test_t2va_plugin_on_equals_off(
    h3: Any, monkeypatch: pytest.MonkeyPatch, short_edge: int, duration: float, seeds: Any
) -> None:
    for seed in seeds:
        arms = both_arms(h3, monkeypatch, seed, short_edge, duration)
        off, on, seen, (start, rng_off, rng_on) = arms
        assert len(off) > 10 and any(k.startswith("dit[") for k in off)
        assert same(off, on) == [], seed
        # both draws were prepared, on prenoise's worker, with the request's torch seed
        assert [label for label, *_ in seen] == ["initial_video_noise", "initial_audio_noise"]
        assert all(s == seed % 2**64 and t.startswith("prenoise-sglang") for _l, s, t, _p in seen)
        assert all(t != threading.current_thread().name for _l, _s, t, _p in seen)
        # the Denoising stage received the very tensors drawn on the worker (served, not redrawn)
        assert on["served_ptrs"] == [p for *_, p in seen]
        assert torch.equal(rng_on, rng_off) and torch.equal(rng_on, start)


def test_plan_changed_after_entry_runs_upstreams_draw(
    h3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stage's plan has another seed than the one at entry: the key check refuses the
    prepared draws and upstream draws the stage plan's noise (breaking the key check fails
    this test: the prepared noise of seed 5 would reach the DiT)."""
    import msgspec

    def reseed(batch: Any) -> None:
        plan = batch.extra["minimax_h3_resolved_plan"]
        batch.extra["minimax_h3_resolved_plan"] = msgspec.structs.replace(plan, seed=6)

    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run(h3, make_request(h3, 5, 64, 4.0), before_latents=reseed)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    with recorded_draws() as seen:
        on = run(h3, make_request(h3, 5, 64, 4.0), before_latents=reseed)
    assert {s for _l, s, _t, _p in seen} == {5}  # prepared for the entry plan's seed ...
    assert same(off, on) == []  # ... and not used


def test_encoder_failure_propagates_and_joins(h3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")

    class EncoderError(RuntimeError):
        pass

    def fail(_batch: Any) -> None:
        raise EncoderError("text encoder failed")

    with recorded_draws(), pytest.raises(EncoderError, match="text encoder failed"):
        run(h3, make_request(h3, 9, 128, 15.0), before_latents=fail)
    alive = [t.name for t in threading.enumerate() if t.name.startswith("prenoise-sglang")]
    assert alive == []


def test_changed_digest_runs_upstream_with_one_line(
    h3: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = next(k for k in reviewed.REVIEWED if k.endswith(":MiniMaxH3LatentPreparationStage"))
    monkeypatch.setitem(reviewed.REVIEWED, key, {"000000000000": ("0.5.23",)})
    monkeypatch.setattr(plugin, "_said", set())
    support.reset()
    try:
        hooks_before = {t: list(h) for t, h in h3.plugins.HookRegistry._hooks.items()}
        with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
            plugin.register()
            plugin.register()
        lines = [r for r in caplog.records if r.name == "prenoise.sglang"]
        assert len(lines) == 1 and lines[0].levelno == logging.WARNING
        assert "MiniMaxH3LatentPreparationStage" in lines[0].getMessage()
        assert "upstream's code runs untouched" in lines[0].getMessage()
        assert {t: list(h) for t, h in h3.plugins.HookRegistry._hooks.items()} == hooks_before
        # the hooks already applied in this process pass every call to upstream
        monkeypatch.setenv(plugin.ENABLE_ENV, "0")
        off = run(h3, make_request(h3, 11, 64, 4.0))
        monkeypatch.setenv(plugin.ENABLE_ENV, "1")
        with recorded_draws() as seen:
            on = run(h3, make_request(h3, 11, 64, 4.0))
        assert seen == [] and same(off, on) == []
    finally:
        monkeypatch.undo()
        support.reset()
    assert support.current().h3_initial


def test_disabled_and_bad_setting_register_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(plugin, "_said", set())
    for value, level in (("0", logging.INFO), ("off", logging.ERROR)):
        monkeypatch.setenv(plugin.ENABLE_ENV, value)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
            plugin.register()
        (line,) = [r for r in caplog.records if r.name == "prenoise.sglang"]
        assert line.levelno == level and plugin.ENABLE_ENV in line.getMessage()
