"""`prenoise demo`: equal when nothing is broken, and not equal (exit 1) when one arm is."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from overlap import OverlapRecorder
from prenoise.cli import demo as demo_module
from prenoise.cli.commands import main
from prenoise.cli.demo import run_demo
from prenoise.noise.layouts import Patchify

WORKER = "prenoise-prep"


def test_demo_arms_are_bitwise_equal_and_overlapped(overlap: OverlapRecorder) -> None:
    result = run_demo(seed=3, encode_seconds=0.05)
    assert result.equal and result.rng_state_unchanged, result.summary()
    assert set(result.report.fields) == {"video", "audio", "condition", "condition_anchor"}
    overlap.assert_prepared_ahead(WORKER, ["video", "audio", "condition"])
    for job in ("video", "audio", "condition"):
        assert overlap.draws_in(job) == [job]
    # warm-up and serial arm: the same three draws, twice, on the request thread
    serial = overlap.draws_outside_jobs()
    assert [d.name for d in serial] == ["video", "audio", "condition"] * 2
    assert {d.thread for d in serial} == {threading.current_thread().name}


def test_demo_matches_plain_torch() -> None:
    """An independent reference: the demo's video noise is `torch.randn` patchified by hand."""
    plan = demo_module.demo_plan(3, t=2, h=4, w=6, audio_t=5, cond_t=2)
    drawn = demo_module.run_stream(plan.streams[0])["video"]
    full = torch.randn(1, 24, 2, 4, 6, generator=torch.Generator().manual_seed(3))
    rows = full.view(1, 24, 2, 1, 2, 2, 3, 2).permute(0, 2, 4, 6, 1, 3, 5, 7).reshape(-1, 96)
    assert torch.equal(drawn.view(torch.int32), rows.contiguous().view(torch.int32))
    assert isinstance(plan.streams[0].draws[0].layout, Patchify)


def _flip(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    out.view(-1).view(torch.int32)[0] ^= 1
    return out


CHANGES: dict[str, tuple[str, Callable[[torch.Tensor], torch.Tensor], str]] = {
    "one_bit": ("video", _flip, "values"),
    "stride": ("audio", lambda t: t.t().contiguous().t(), "stride"),
    "dtype": ("audio", lambda t: t.double(), "dtype"),
    "shape": ("audio", lambda t: t.reshape(-1, 16), "shape"),
}


def break_worker_draws(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """Change what the overlapped arm's worker draws (or make it touch the global RNG)."""
    real = demo_module.run_stream

    def run_stream(*args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        result = real(*args, **kwargs)
        if not threading.current_thread().name.startswith(WORKER):
            return result
        if case == "global_rng":
            torch.rand(1)
            return result
        name, change, _ = CHANGES[case]
        return {k: change(v) if k == name else v for k, v in result.items()}

    monkeypatch.setattr(demo_module, "run_stream", run_stream)


def break_overlapped_mix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flip one bit of the third mix (warm-up, serial, overlapped): the overlapped arm's."""
    real = demo_module.mix_conditions
    calls: list[int] = []

    def mix_conditions(*args: Any) -> torch.Tensor:
        calls.append(1)
        out = real(*args)
        return _flip(out) if len(calls) == 3 else out

    monkeypatch.setattr(demo_module, "mix_conditions", mix_conditions)


@pytest.mark.parametrize("case", [*CHANGES, "mix", "global_rng"])
def test_demo_reports_a_broken_arm(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    if case == "mix":
        break_overlapped_mix(monkeypatch)
    else:
        break_worker_draws(monkeypatch, case)
    result = run_demo(seed=3, encode_seconds=0.01)
    assert not result.equal
    if case == "global_rng":
        assert result.report.equal and not result.rng_state_unchanged
        assert result.summary().endswith("global RNG CHANGED")
        return
    assert result.rng_state_unchanged
    field, expected = ("condition_anchor", "values") if case == "mix" else CHANGES[case][::2]
    assert [f.path for f in result.report.differing] == [field]
    assert expected in result.report.fields[field].differences


@pytest.mark.parametrize("case", ["one_bit", "global_rng"])
def test_cli_demo_exits_1_when_an_arm_is_broken(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    break_worker_draws(monkeypatch, case)
    assert main(["demo", "--encode-seconds", "0.01"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert ("global RNG CHANGED" if case == "global_rng" else "DIFFERENT") in out


def test_cli_demo_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--encode-seconds", "0.05"]) == 0
    assert "bitwise equal: 4/4 fields; global RNG unchanged" in capsys.readouterr().out


def test_cli_demo_vllm_omni_names_what_to_install_where_it_is_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`prenoise demo vllm-omni` without vLLM-Omni: one line naming what to install, exit 2
    (where it is installed, tests/vllm_omni_plugin/test_demo.py runs it)."""
    import importlib.util

    if importlib.util.find_spec("vllm_omni") is not None:
        pytest.skip("vLLM-Omni is installed here")
    assert main(["demo", "vllm-omni"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("error: prenoise demo vllm-omni needs vLLM-Omni (not installed here)")
    assert "make setup-vllm-omni, then .venv-vllm-omni/bin/prenoise demo vllm-omni" in out
