"""`prenoise sglang-verify` where sglang is not installed (the main venv): one line naming what
to install, exit 2, nothing written; the command's own tests run in `.venv-sglang`
(`tests/sglang_plugin/test_sglang_verify.py`)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from prenoise.cli.commands import main


@pytest.fixture
def no_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if sglang were not installed (it is not, in the main venv; this holds elsewhere too)."""
    find_spec = importlib.util.find_spec

    def without_sglang(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "sglang" else find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_sglang)


def test_without_sglang_one_line_and_exit_2(
    no_sglang: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = tmp_path / "out" / "r.json"
    assert main(["sglang-verify", "--json", str(report)]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("error: sglang is not installed here"), out
    assert 'pip install "prenoise[sglang]"' in out and "sglang 0.5.23" in out
    assert not report.parent.exists()


def test_the_console_script_says_so_too() -> None:
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("sglang is installed in this environment")
    done = subprocess.run(
        [sys.executable, "-m", "prenoise", "sglang-verify"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done
    assert done.stdout.count("\n") == 1 and "prenoise[sglang]" in done.stdout
    assert done.stderr == ""


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang installed")
def test_doctor_says_the_sglang_plugin_is_inactive_without_sglang() -> None:
    """Where sglang is not installed (this venv), doctor's SGLang rows say so and list no path."""
    from prenoise.integrations.sglang import status

    found = status.sglang_status({})
    assert found.sglang_version is None
    assert found.verdict == "inactive: sglang is not installed here"
    assert [name for name, _ in found.rows()][:2] == ["SGLang plugin", "sglang"]
    assert not any(name == "sglang-verify" for name, _ in found.rows())
