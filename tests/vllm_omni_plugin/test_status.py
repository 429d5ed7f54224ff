"""`prenoise doctor` reports the vLLM-Omni plugin: version support, entry point, settings."""

from __future__ import annotations

import subprocess
import sys

import pytest
from release import RELEASE

from prenoise.integrations.vllm_omni import status, support
from waits import READY_CEILING_S

ACTIVE = "active in every vLLM-Omni process (MiniMax-H3, stream native)"
CODE = f"code of {RELEASE}"  # every path on, on every reviewed release


def test_here_the_plugin_is_registered_supported_and_active() -> None:
    found = status.plugin_status({})
    assert found.vllm_omni_version == RELEASE and found.supported
    assert found.entry_point == "prenoise.integrations.vllm_omni:register"
    assert found.rows() == [
        ("vLLM-Omni plugin", ACTIVE),
        ("vllm-omni", f"{found.vllm_omni_version} ({CODE})"),
        ("MiniMax-H3 noise prepared ahead", "on (the reviewed code)"),
        ("MiniMax-H3 noise streams", "on (the reviewed code)"),
        ("Wan2.2 T2V latents prepared ahead", "on (the reviewed code)"),
        (
            "vllm-omni-verify",
            "proves MiniMax-H3's noise prepared ahead by prenoise (plugin off vs on)",
        ),
        ("entry point vllm_omni.general_plugins", "prenoise.integrations.vllm_omni:register"),
        ("VLLM_PLUGINS", "(unset)"),
        (
            "plugin settings",
            "PRENOISE_VLLM_OMNI=1 PRENOISE_VLLM_OMNI_ON_MISMATCH=serial "
            "PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=0 PRENOISE_VLLM_OMNI_NOISE_STREAM=native",
        ),
    ]


@pytest.mark.parametrize(
    ("environ", "verdict"),
    [
        ({"PRENOISE_VLLM_OMNI": "0"}, "inactive: disabled by PRENOISE_VLLM_OMNI=0"),
        (
            {"PRENOISE_VLLM_OMNI": "off"},
            "inactive: PRENOISE_VLLM_OMNI='off': expected one of 0, 1 (the plugin installs "
            "nothing)",
        ),
        ({"VLLM_PLUGINS": "other"}, "inactive: VLLM_PLUGINS='other' does not name 'prenoise'"),
        (
            {"VLLM_PLUGINS": "other, prenoise"},
            "inactive: VLLM_PLUGINS='other, prenoise' does not name 'prenoise'",
        ),  # fmt: skip  (vLLM splits on ',' and does not strip)
        ({"VLLM_PLUGINS": "other,prenoise"}, ACTIVE),
        ({"PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT": "1"}, ACTIVE),
    ],
)
def test_the_verdict_names_what_keeps_it_inactive(environ: dict[str, str], verdict: str) -> None:
    assert status.plugin_status(environ).verdict == verdict


def test_changed_code_missing_or_unregistered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict follows the code, not the version: a later version with the reviewed code is
    active as the release it equals; a changed draw is named."""
    monkeypatch.setattr(status, "installed_version", lambda name: "0.33.0")
    assert status.plugin_status({}).verdict == ACTIVE
    problem = "MiniMaxH3Pipeline._initial_noise (m) changed: digest x; reviewed y (0.30.0)"
    both = {support.H3_STREAMS_PATH: problem, support.H3_AHEAD_PATH: problem}
    changed = support.Support(both)
    monkeypatch.setattr(support, "current", lambda: changed)
    found = status.plugin_status({})
    assert not found.supported
    rows = found.rows()
    assert rows[1] == (
        "vllm-omni",
        "0.33.0 (no reviewed release's code; MiniMax-H3 noise prepared ahead off: "
        "MiniMaxH3Pipeline._initial_noise is not the reviewed code; MiniMax-H3 noise streams "
        "off: MiniMaxH3Pipeline._initial_noise is not the reviewed code)",
    )
    off = f"off: upstream's code runs untouched; {problem}; {support.NEXT_STEP}"
    assert rows[2:6] == [
        ("MiniMax-H3 noise prepared ahead", off),
        ("MiniMax-H3 noise streams", off),
        ("Wan2.2 T2V latents prepared ahead", "on (the reviewed code)"),
        (
            "vllm-omni-verify",
            "exits 1 here: MiniMax-H3 noise prepared ahead is off, so prenoise prepares nothing "
            "for it to prove",
        ),
    ]
    assert support.NEXT_STEP.startswith("prenoise supports the code of vllm-omni 0.30.0, ")
    assert found.verdict == (
        "active in every vLLM-Omni process for Wan2.2 T2V latents prepared ahead only (stream "
        "native); off here: MiniMax-H3 noise streams, MiniMax-H3 noise prepared ahead (see the "
        "rows below)"
    )  # never "active" for MiniMax-H3 while its paths are off
    every = support.Support({path: problem for path in support.PATHS})
    monkeypatch.setattr(support, "current", lambda: every)
    assert status.plugin_status({}).verdict == (
        "inactive: every path runs upstream's code untouched here (the code changed: see the "
        "rows below)"
    )
    monkeypatch.setattr(status, "installed_version", lambda name: None)
    assert status.plugin_status({}).verdict == "inactive: vllm-omni is not installed here"
    monkeypatch.setattr(status, "installed_version", lambda name: RELEASE)
    monkeypatch.setattr(status, "_entry_point", lambda: None)
    assert status.plugin_status({}).verdict == (
        "inactive: the entry point is not registered (reinstall prenoise)"
    )


def _doctor(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prenoise", "doctor"],
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=False,
    )


def test_doctor_prints_the_plugin_rows() -> None:
    proc = _doctor(PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT="1")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert f"vLLM-Omni plugin │ {ACTIVE}" in out
    assert "prenoise.integrations.vllm_omni:register" in out
    assert "PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=1" in out


def test_doctor_with_a_bad_plugin_setting_is_one_line() -> None:
    """As for every PRENOISE_* variable, every command (doctor too) refuses to start."""
    proc = _doctor(PRENOISE_VLLM_OMNI="off")
    assert proc.returncode == 2
    assert proc.stdout == (
        "error: PRENOISE_VLLM_OMNI='off' is not a known value (accepted: 0, 1; unset means 1)\n"
    )
