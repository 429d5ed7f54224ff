"""`prenoise doctor` reports the vLLM-Omni plugin: version support, entry point, settings."""

from __future__ import annotations

import subprocess
import sys

import pytest

from prenoise.integrations.vllm_omni import status

ACTIVE = "active in every vLLM-Omni process (MiniMax-H3, stream native)"


def test_here_the_plugin_is_registered_supported_and_active() -> None:
    found = status.plugin_status({})
    assert found.vllm_omni_version is not None and found.vllm_omni_version.startswith("0.30.")
    assert found.entry_point == "prenoise.integrations.vllm_omni:register"
    assert found.rows() == [
        ("vLLM-Omni plugin", ACTIVE),
        ("vllm-omni", f"{found.vllm_omni_version} (supported)"),
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


def test_unsupported_missing_or_unregistered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "installed_version", lambda name: "0.31.0")
    assert status.plugin_status({}).verdict == (
        "inactive: vllm-omni 0.31.0 is not supported (0.30.x)"
    )
    assert status.plugin_status({}).rows()[1] == ("vllm-omni", "0.31.0 (not supported)")
    monkeypatch.setattr(status, "installed_version", lambda name: None)
    assert status.plugin_status({}).verdict == "inactive: vllm-omni is not installed here"
    monkeypatch.setattr(status, "installed_version", lambda name: "0.30.0")
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
        timeout=120,
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
