"""`prenoise demo diffusers [--modular]`: the real command, verified on tiny pipelines shipped in
the package, and NOT EQUAL (exit 1) when a served draw is broken or nothing is prepared."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import torch

from prenoise.cli.commands import main
from prenoise.preparation import served as served_module

pytest.importorskip("diffusers")


def _out(capsys: pytest.CaptureFixture[str]) -> str:
    return " ".join(capsys.readouterr().out.split())


def test_the_command_verifies_wan_without_checkpoint_or_ftfy_stub() -> None:
    """The console script in a fresh process (no test fixture, no ftfy stub), offline."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PRENOISE_DEBUG": "0"}
    script = os.path.join(os.path.dirname(sys.executable), "prenoise")
    run = subprocess.run(
        [script, "demo", "diffusers", "--pairs", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    out = " ".join(run.stdout.split())
    assert run.returncode == 0, run.stdout + run.stderr
    assert "enable(pipe): served 1/1 prepared draws (noise)" in out
    assert "WanPipeline: medians of 1 alternating pairs" in out
    assert out.endswith("verified: bitwise equal: 6/6 fields; global RNG unchanged")


def test_modular_is_verified(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "diffusers", "--modular", "--pairs", "1"]) == 0
    out = _out(capsys)
    assert "LTX2ModularPipeline" in out
    assert "served 2/2 prepared draws (video, audio)" in out
    assert out.endswith("verified: bitwise equal: 9/9 fields; global RNG unchanged")


def _flip_one_bit(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    out.view(-1).view(torch.int32)[0] ^= 1
    return out


@pytest.mark.parametrize("modular", [False, True], ids=["classic", "modular"])
def test_a_broken_served_draw_is_not_equal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], modular: bool
) -> None:
    """One bit flipped in every draw prenoise serves: the demo says NOT EQUAL, exit 1."""
    real = served_module.ServedDraws.serve

    def serve(self: Any, *args: Any, **kwargs: Any) -> Any:
        tensor = real(self, *args, **kwargs)
        return None if tensor is None else _flip_one_bit(tensor)

    monkeypatch.setattr(served_module.ServedDraws, "serve", serve)
    argv = ["demo", "diffusers", "--pairs", "1", *(["--modular"] if modular else [])]
    assert main(argv) == 1
    out = _out(capsys)
    assert "NOT EQUAL: DIFFERENT:" in out
    assert "differs: checked." in out


def test_nothing_prepared_is_not_verified(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Equal outputs prove nothing of prenoise when the enabled call ran plain: exit 1."""
    from prenoise.integrations.diffusers import call as call_module
    from prenoise.integrations.diffusers.plan import Unpredictable

    def unpredictable(*args: Any, **kwargs: Any) -> Any:
        raise Unpredictable("broken on purpose by the test", "test")

    monkeypatch.setattr(call_module, "_plan_with_arguments", unpredictable)
    assert main(["demo", "diffusers", "--pairs", "0"]) == 1
    out = _out(capsys)
    assert "NOT PREPARED AHEAD: the plain call ran (broken on purpose by the test)" in out
    assert "NOT VERIFIED (not prepared ahead): bitwise equal" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--modular"], "--modular: prenoise demo (the core demo) does not take it"),
        (["demo", "diffusers", "--encode-seconds", "1"], "--encode-seconds: prenoise demo"),
        (["demo", "vllm-omni", "--pairs", "1"], "--pairs: prenoise demo vllm-omni"),
    ],
)
def test_an_option_of_another_demo_is_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(argv) == 2
    assert message in _out(capsys)


def test_a_missing_package_is_one_line_naming_the_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prenoise.cli import integration_demos

    monkeypatch.setattr(integration_demos, "_missing", lambda modules: ["transformers"])
    assert main(["demo", "diffusers"]) == 2
    out = _out(capsys)
    assert out.startswith("error: prenoise demo diffusers needs transformers (not installed): ")
    assert out.endswith("[diffusers]' transformers") or out.endswith("[diffusers] transformers")
