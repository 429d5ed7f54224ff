"""`prenoise vllm-omni-verify`: exit codes, the JSON schema, and a verdict that needs the
overlapped path to have run (issue #20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from prenoise.cli.commands import main
from prenoise.integrations.vllm_omni import request as request_module
from prenoise.integrations.vllm_omni.request import observe_draws
from prenoise.integrations.vllm_omni.settings import ENABLE_ENV, NEXT_OUTPUT_ENV
from prenoise.integrations.vllm_omni.standins import StandInHooks
from prenoise.integrations.vllm_omni.verification import H3Request, verify_request

NOISE = ("initial_video_noise", "initial_audio_noise", "visual_condition_noise")


def verify(tmp_path: Path, *argv: str) -> tuple[int, dict | None]:
    """Run the command (one output step: fast); its status and the JSON report, if written."""
    out = tmp_path / "verify.json"
    status = main(["vllm-omni-verify", "--steps", "1", *argv, "--json", str(out)])
    return status, json.loads(out.read_text()) if out.exists() else None


def test_verify_writes_the_schema_and_exits_0(tmp_path: Path, image_ref: Path) -> None:
    status, report = verify(tmp_path, "--reference", str(image_ref), "--outputs", "2")
    assert status == 0 and report is not None
    assert report["verified"] is True and report["equal"] is True
    assert report["prepared"] is True and report["not_prepared_reasons"] == []
    assert report["uncompared"] == [] and report["rng_state_unchanged"] is True
    assert report["summary"].startswith("verified: bitwise equal")
    for name in NOISE:
        entry = report["fields"][name]
        assert entry["equal"] and len(entry["sha256"]) == 64 and entry["shape"]
        assert entry["sha256"] == entry["plugin_on_sha256"]
        assert report["arms"]["plugin_on"]["drawn_on"][name].startswith("prenoise-vllm-omni")
        assert report["arms"]["plugin_off"]["drawn_on"][name] == "MainThread"
    assert "denoise.cond_anchor" in report["fields"]
    assert set(report["geometry"]) == {
        "latent_t",
        "latent_h",
        "latent_w",
        "audio_t",
        "condition_shapes",
    }


def test_verify_exits_1_when_an_arm_differs(tmp_path: Path, image_ref: Path) -> None:
    def flip(name: str, seed: int, tensor: torch.Tensor) -> None:
        if name == "initial_audio_noise":
            tensor.view(torch.int32).view(-1)[0] ^= 1

    with observe_draws(flip):
        status, report = verify(tmp_path, "--reference", str(image_ref))
    assert status == 1 and report is not None
    assert report["equal"] is False and report["verified"] is False
    assert report["fields"]["initial_audio_noise"]["differences"] == ["values"]


def test_verify_exits_2_on_a_missing_reference(tmp_path: Path) -> None:
    status, report = verify(tmp_path, "--reference", str(tmp_path / "nope.png"))
    assert status == 2 and report is None


# -- class 1: "equal" is not a verdict unless the plugin arm prepared ahead ----------------------


def test_plugin_disabled_by_setting_is_refused_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`PRENOISE_VLLM_OMNI=0` made both arms run upstream's code and the command say "bitwise
    equal 39/39", exit 0. Now: nothing to verify, one line, exit 2, no report."""
    monkeypatch.setenv(ENABLE_ENV, "0")
    status, report = verify(tmp_path)
    assert status == 2 and report is None
    [line] = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("error: plugin disabled by PRENOISE_VLLM_OMNI=0: nothing to verify")


def test_disabled_plugin_is_not_verified_in_process(
    image_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENABLE_ENV, "0")
    result = verify_request(H3Request((image_ref,), steps=1))
    assert result.equal  # both arms ran upstream: of course equal
    assert not result.prepared and not result.verified
    [reason] = result.not_prepared_reasons
    assert reason.startswith("plugin disabled by PRENOISE_VLLM_OMNI=0")
    assert result.to_json()["verified"] is False
    assert result.summary().startswith("NOT VERIFIED")


def test_request_not_eligible_exits_1_naming_why(
    tmp_path: Path, image_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = "stand-in: a request the plugin does not prepare"
    monkeypatch.setattr(
        request_module.RequestPreparation, "_ineligible", lambda self, prepared: reason
    )
    status, report = verify(tmp_path, "--reference", str(image_ref))
    assert status == 1 and report is not None
    assert report["equal"] is True  # upstream's serial code in both arms
    assert report["verified"] is False and report["prepared"] is False
    assert report["not_prepared_reasons"] == [f"request not eligible: {reason}"]
    assert "PLUGIN ARM NOT PREPARED AHEAD" in report["summary"]


def test_prediction_mismatch_is_not_verified(video_ref: Path) -> None:
    """The condition shapes the prediction missed: upstream's serial draw ran instead (equal
    bits, but the overlapped path did not run for that tensor)."""
    hooks = StandInHooks(video_latent_t_offset=1)
    result = verify_request(H3Request((video_ref,), seed=9, steps=1), hooks=hooks)
    assert result.equal and not result.verified
    reasons = result.not_prepared_reasons
    assert any(r.startswith("prediction mismatch:") for r in reasons), reasons
    assert any(r.startswith("visual_condition_noise: drawn ahead but not used") for r in reasons)
    assert not any(r.startswith("initial_") for r in reasons)  # those were prepared and taken


def test_prepare_next_output_requires_every_output_prepared(
    image_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NEXT_OUTPUT_ENV, "1")
    result = verify_request(H3Request((image_ref,), seed=5, outputs=2, steps=1))
    assert result.verified, result.summary()
    # The same run where output 2 is not submitted: not verified, and it says which noise.
    submit = request_module.RequestPreparation._submit

    def first_output_only(
        self: request_module.RequestPreparation,
        initial: request_module.InitialNoiseKey,
        condition: request_module.ConditionKey | None,
        **kwargs: bool,
    ) -> None:
        if initial.seed == 5:
            submit(self, initial, condition, **kwargs)

    monkeypatch.setattr(request_module.RequestPreparation, "_submit", first_output_only)
    result = verify_request(H3Request((image_ref,), seed=5, outputs=2, steps=1))
    assert result.equal and not result.verified
    assert result.not_prepared_reasons == [
        f"output1.{name}: not drawn ahead (upstream's serial code drew it)" for name in NOISE
    ]


def test_verify_says_each_phase_on_stderr(
    tmp_path: Path, image_ref: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 41: 50-96 s with only upstream's own progress bars. Now a line per phase on stderr
    (not on a terminal), the report alone on stdout."""
    capsys.readouterr()
    status, _ = verify(tmp_path, "--reference", str(image_ref))
    assert status == 0
    captured = capsys.readouterr()
    stages = [
        line.split("] ", 1)[1]
        for line in captured.err.splitlines()
        if line.startswith("[prenoise vllm-omni-verify ")
    ]
    assert stages == [
        "importing vLLM-Omni",
        "checking the settings, the request and its references",
        "MiniMax-H3's forward, plugin off (upstream's code)",
        "MiniMax-H3's forward, plugin on (prenoise)",
        "comparing every field, bitwise",
    ]
    assert "[prenoise " not in captured.out
