"""MiniMax-H3 in a named noise stream (`PRENOISE_VLLM_OMNI_NOISE_STREAM`): every draw, both paths.

The references are upstream's own `forward` in this process (`x86`: this x86 host's torch is the
x86 stream) and in a subprocess whose torch runs its scalar CPU kernels
(`ATEN_CPU_CAPABILITY=default`: torch's arithmetic is the `libm` stream there). Only the noise
fields and the `_build_denoise_inputs` tensors that do not mix in the media encoders' output are
compared across processes: the (stand-in) encoders compute on the CPU, and their kernels differ
with the capability too (~22% of the clean condition rows here), so `cond_anchor` (clean rows mixed
with the condition noise) differs there for reasons that are not noise.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from release import UPSTREAM_AHEAD, first_output_worker
from scalar_host import SEED, ScalarHost

from cli_refusals import refused
from prenoise.cli.commands import main
from prenoise.integrations.vllm_omni import plugin, streams
from prenoise.integrations.vllm_omni.settings import NOISE_STREAM_ENV
from prenoise.integrations.vllm_omni.verification import (
    AUDIO_CONDITION,
    NOISE_FIELDS,
    H3Request,
    run_arm,
    verify_request,
)
from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import draws_in_stream
from prenoise.noise.streams import NoiseStreamError

WORKER = first_output_worker()
# the first output's noise is prepared ahead (0.32.0rc1: by upstream's own code, on its worker),
# the second's drawn serially by upstream's code
SERIAL = tuple("output1." + name for name in NOISE_FIELDS)
UPSTREAM_CODE_DRAWS = 6 if UPSTREAM_AHEAD else 3
"""Draws upstream's code makes (`serial_draws`), every one of them in the stream: output 1's
three, and on 0.32.0rc1 the first output's three on upstream's own worker thread (which a context
variable does not reach: `request.adopted`)."""


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().view(torch.uint8)  # any dtype, every bit


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def noise_of(fields: dict[str, Any]) -> dict[str, torch.Tensor]:
    names = NOISE_FIELDS + SERIAL
    return {name: fields[name] for name in names if name in fields}


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    value: str = request.param
    monkeypatch.setenv(NOISE_STREAM_ENV, value)
    return value


x86_only = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="the x86 stream is local torch on x86"
)


@x86_only
@pytest.mark.parametrize("stream", ["x86"], indirect=True)
def test_x86_stream_prepared_and_serial_equal_upstream_natively(
    image_ref: Path, stream: str
) -> None:
    """On this x86 host the x86 stream is local torch: plugin on in `x86` equals upstream with
    no prenoise at all (native), every field, the serial draws of output 1 included."""
    request = H3Request((image_ref,), seed=7, outputs=2)
    on = run_arm(request, plugin_on=True)
    os.environ[NOISE_STREAM_ENV] = "native"
    off = run_arm(request, plugin_on=False)
    assert on.noise_stream == "x86" and off.noise_stream == "native"
    assert set(on.fields) == set(off.fields)
    for name, tensor in off.fields.items():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
            assert same_bits(on.fields[name], tensor), name
    assert on.drawn_on["initial_video_noise"].startswith(WORKER)
    assert on.drawn_on["output1.initial_video_noise"] == threading.current_thread().name
    # output 1: video + audio + one condition draw, all three through the stream's mode
    assert on.serial_draws == UPSTREAM_CODE_DRAWS and on.serial_streamed == UPSTREAM_CODE_DRAWS


ENCODER_DEPENDENT = frozenset({"cond_anchor"})
"""`_build_denoise_inputs` fields that mix in the media encoders' CPU output (see above)."""


def compared_across_hosts(fields: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Every tensor field but those that depend on the encoders' arithmetic."""
    return {
        name: value
        for name, value in fields.items()
        if isinstance(value, torch.Tensor) and name.split(".")[-1] not in ENCODER_DEPENDENT
    }


@pytest.mark.parametrize("stream", ["libm"], indirect=True)
def test_libm_stream_equals_upstream_on_a_scalar_host(
    image_ref: Path, scalar_host: ScalarHost, stream: str
) -> None:
    """libm: the prepared draws (worker) and the serial ones (output 1, upstream's code on the
    request thread) equal what upstream draws where torch's CPU arithmetic is libm's — and differ
    from this host's native draws (so the comparison tests something). Every other
    `_build_denoise_inputs` tensor is compared too, except `ENCODER_DEPENDENT`. The reference:
    upstream's forward, plugin off, native, in the `scalar_host` subprocess (scalar_host.py), whose
    torch draws with its scalar (`default` capability) kernels: the libm stream's arithmetic."""
    reference = scalar_host.h3
    seed = SEED  # the request the reference ran
    expected = compared_across_hosts(reference)
    on = run_arm(H3Request((image_ref,), seed=seed, outputs=2), plugin_on=True)
    got = compared_across_hosts(on.fields)
    assert set(got) == set(expected) and set(NOISE_FIELDS + SERIAL) <= set(got)
    assert len(got) > len(NOISE_FIELDS + SERIAL)  # the denoise inputs too
    for name, tensor in expected.items():
        assert same_bits(got[name], tensor), name
    assert set(reference) - set(expected) == {"denoise.cond_anchor", "output1.denoise.cond_anchor"}
    assert on.drawn_on["initial_video_noise"].startswith(WORKER)
    assert on.serial_draws == on.serial_streamed == UPSTREAM_CODE_DRAWS
    os.environ[NOISE_STREAM_ENV] = "native"
    native = noise_of(
        run_arm(H3Request((image_ref,), seed=seed, outputs=2), plugin_on=False).fields
    )
    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":
        assert not same_bits(native["initial_video_noise"], got["initial_video_noise"])
        assert not same_bits(native[SERIAL[0]], got[SERIAL[0]])


@pytest.mark.parametrize("stream", ["libm"], indirect=True)
def test_verify_passes_in_a_stream_and_counts_serial_draws(image_ref: Path, stream: str) -> None:
    """The verifier's plugin-off arm is upstream's whole forward inside `draws_in_stream`: it
    equals the plugin-on arm, and the report names the stream of both arms."""
    result = verify_request(H3Request((image_ref,), seed=3, outputs=2, steps=1))
    assert result.verified, result.summary()
    assert result.on.noise_stream == result.off.noise_stream == "libm"
    report = result.to_json()
    assert report["noise_stream"] == "libm"
    assert report["arms"]["plugin_on"]["serial_draws"] == UPSTREAM_CODE_DRAWS
    assert report["arms"]["plugin_on"]["serial_draws_in_stream"] == UPSTREAM_CODE_DRAWS


@pytest.mark.parametrize("stream", ["libm"], indirect=True)
def test_a_serial_draw_outside_the_stream_fails_the_verdict(
    image_ref: Path, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If upstream's serial draws ran natively under a named stream (prenoise forgetting the
    stream on the serial path), the verifier says so: fields differ, and the counts say why."""
    monkeypatch.setattr(plugin, "run_serial", lambda fn, *a, **k: fn(*a, **k))
    result = verify_request(H3Request((image_ref,), seed=3, outputs=2, steps=1))
    assert not result.verified
    assert "0 drawn in noise stream 'libm'" in " ".join(result.not_prepared_reasons)
    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":
        assert not result.report.fields["output1.initial_video_noise"].equal


@pytest.mark.parametrize("stream", ["libm"], indirect=True)
def test_audio_condition_draw_is_in_the_stream(stream: str) -> None:
    """Upstream's audio-condition mix (seed + 1 per condition, drawn only when noise_aug < 1;
    0.30.0's forward passes 1.0) is wrapped by name in the pipeline module: in the stream."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    # two audio conditions (2 rows per latent frame), each drawn from its own seed + 1 generator
    clean = torch.linspace(-1, 1, 32 * 54, dtype=torch.float32).reshape(-1, 32)
    kwargs: dict[str, Any] = {"condition_audio_t": [20, 7], "seed": 11, "noise_aug": 0.25}
    original = plugin.original("minimax_h3_audio_cond_noise_aug_rows")
    plugin.install()
    served = streams.serial_draws_served()
    got = upstream.minimax_h3_audio_cond_noise_aug_rows(clean, **kwargs)
    assert streams.serial_draws_served() == served + 2
    with draws_in_stream("libm"):
        expected = original(clean, **kwargs)
    assert same_bits(got, expected)
    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":
        assert not same_bits(got, original(clean, **kwargs))
    # noise_aug 1: upstream returns the clean rows, nothing is drawn
    assert (
        upstream.minimax_h3_audio_cond_noise_aug_rows(clean, **(kwargs | {"noise_aug": 1.0}))
        is clean
    )
    assert streams.serial_draws_served() == served + 2
    assert AUDIO_CONDITION == "audio_condition_noise"


def refuse_libm_in_this_process() -> None:
    """Make this process's libm self-check fail (a golden digest that cannot match)."""
    bad = noise_streams.load_goldens()
    case = next(c for c in bad["streams"]["libm"]["cases"] if c["dtype"] == "float32")
    case["sha256"] = hashlib.sha256(b"not the stream").hexdigest()
    noise_streams._resolve("libm", goldens=bad)


@pytest.mark.parametrize("stream", ["libm"], indirect=True)
def test_a_refused_stream_fails_the_request_before_anything_is_drawn(
    image_ref: Path, stream: str
) -> None:
    """Never silently native: a stream this process refuses fails every H3 request with
    NoiseStreamError before upstream's forward runs."""
    from prenoise.integrations.vllm_omni.standins import build_pipeline

    refuse_libm_in_this_process()
    try:
        plugin.install()
        pipe = build_pipeline()
        generator_state = torch.default_generator.get_state()
        with pytest.raises(NoiseStreamError, match="self-check"):
            pipe.forward(H3Request((image_ref,), seed=1).forward_request())
        assert torch.equal(torch.default_generator.get_state(), generator_state)
    finally:
        noise_streams._reset()


def test_verify_cli_noise_stream(tmp_path: Path, image_ref: Path) -> None:
    """A Ref2VA request in libm on every release: on 0.32.0rc1 upstream draws its first output
    ahead itself, and prenoise's work proven is drawing all of upstream's serial draws in the
    stream (verified, not 'prenoise drew nothing')."""
    out = tmp_path / "verify.json"
    argv = ["vllm-omni-verify", "--kind", "ref2va", "--steps", "1", "--reference", str(image_ref)]
    assert main([*argv, "--outputs", "2", "--noise-stream", "libm", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["verified"] is True and report["noise_stream"] == "libm"
    assert report["arms"]["plugin_off"]["noise_stream"] == "libm"
    assert report["arms"]["plugin_on"]["serial_draws_in_stream"] == UPSTREAM_CODE_DRAWS
    assert NOISE_STREAM_ENV not in os.environ  # restored after the run


def test_verify_cli_refuses_an_unknown_stream(
    tmp_path: Path, image_ref: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "verify.json"
    argv = ["vllm-omni-verify", "--reference", str(image_ref), "--json", str(out)]
    line = refused(capsys, [*argv, "--noise-stream", "arm64"])
    assert line == "error: --noise-stream 'arm64': expected one of native, x86, libm"
    assert not out.exists()


def test_verify_cli_refuses_a_stream_the_self_check_refuses(
    tmp_path: Path, image_ref: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "verify.json"
    argv = ["vllm-omni-verify", "--reference", str(image_ref), "--json", str(out)]
    refuse_libm_in_this_process()
    try:
        line = refused(capsys, [*argv, "--noise-stream", "libm"])
    finally:
        noise_streams._reset()
    assert "libm" in line and "self-check" in line
    assert not out.exists()
