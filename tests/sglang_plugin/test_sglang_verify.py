"""`prenoise sglang-verify`, run in-process through the command's own entry (`main`): verified
for t2va, fl2va and a cps rollout; NOT verified when the plugin serves a tensor one bit off,
and when it prepares nothing (every field then equal: equality alone proves nothing); refused
with one line for a rollout of another task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from prenoise.cli.commands import main
from prenoise.integrations.sglang import h3_initial


def _verify(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str
) -> tuple[int, dict[str, Any], str]:
    report = tmp_path / "report.json"
    status = main(["sglang-verify", *argv, "--json", str(report)])
    captured = capsys.readouterr()
    data = json.loads(report.read_text()) if report.exists() else {}
    return status, data, captured.out + captured.err


@pytest.mark.parametrize("task", ["t2va", "fl2va"])
def test_verified(h3: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path, task: str) -> None:
    status, report, out = _verify(capsys, tmp_path, "--task", task)
    assert status == 0, out
    assert report["verified"] and not report["not_prepared_reasons"]
    fields = report["fields"]
    assert all(entry["equal"] for entry in fields.values())
    assert any(name.startswith("dit[2].") for name in fields)  # every step's DiT inputs
    assert "global_rng.final_state" in fields
    assert any(name.endswith("initial_video_rows") for name in fields)
    serves = {(s["what"], s["served"]) for s in report["prepared"]["serves"]}
    assert ("initial", True) in serves
    if task == "fl2va":
        assert ("conditions", True) in serves and "cond_noise_aug_rows[0]" in fields
    for phase in ("importing sglang", "plugin off", "plugin on", "comparing"):
        assert f"] {phase}" in out, out  # a progress line per phase (stderr)


def test_a_rollout_is_verified_with_its_noise_served(
    h3: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, report, out = _verify(capsys, tmp_path, "--rollout", "cps", "--steps", "4")
    assert status == 0, out
    rollout = report["prepared"]["rollout"]
    expected = rollout["expected_draws"]
    assert expected > 1 and rollout["answered"] == expected
    assert rollout["served"] == expected  # every draw, the first one too, prepared ahead
    names = set(report["fields"])
    assert "rollout.log_probs" in names and "rollout_generator[0].final_state" in names


def test_a_served_tensor_one_bit_off_is_not_verified(
    h3: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin made to serve the prepared video rows with one bit flipped (in place: the
    very tensor is still served, so only the comparison can catch it)."""
    serve_state = h3_initial.RequestDraws.serve_state

    def wrong(self: Any, batch: Any, plan: Any) -> Any:
        state = serve_state(self, batch, plan)
        if state is not None:
            state["initial_video_rows"].view(torch.int32).view(-1)[7] ^= 1
        return state

    monkeypatch.setattr(h3_initial.RequestDraws, "serve_state", wrong)
    status, report, out = _verify(capsys, tmp_path)
    assert status == 1, out
    assert not report["verified"] and "NOT VERIFIED" in out
    differing = [name for name, entry in report["fields"].items() if not entry["equal"]]
    assert any(name.endswith("initial_video_rows") for name in differing), differing
    entry = next(e for n, e in report["fields"].items() if n.endswith("initial_video_rows"))
    assert entry["differences"] == [f"bits differ in 1 of {entry['shape'][0] * 96} elements"]


def test_nothing_prepared_is_not_verified_although_every_field_is_equal(
    h3: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(h3_initial.RequestDraws, "serve_state", lambda *_a: None)
    status, report, out = _verify(capsys, tmp_path)
    assert status == 1, out
    assert all(entry["equal"] for entry in report["fields"].values())  # upstream drew both arms
    assert report["not_prepared_reasons"] and "not prepared ahead" in report["summary"]


def test_the_options_are_the_verifications() -> None:
    from prenoise.cli import sglang_verify
    from prenoise.integrations.sglang import verification

    assert sglang_verify.TASKS == verification.TASKS
    assert sglang_verify.ROLLOUTS == verification.ROLLOUTS


def test_a_rollout_of_another_task_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, report, out = _verify(capsys, tmp_path, "--task", "fl2va", "--rollout", "cps")
    assert status == 2 and report == {}
    assert out.count("\n") == 1 and "upstream rolls out t2va requests only" in out, out


def _recorded_rollouts(h3: Any, monkeypatch: pytest.MonkeyPatch, folder: Path, seeds: list[int]):
    """A batch of cps rollouts through SGLang's real stages, plugin on, noise recorded."""
    from prenoise.integrations.sglang.harness import capture, make_request
    from prenoise.observe import noise_record

    folder.mkdir()
    monkeypatch.setenv(noise_record.RECORD_ENV, str(folder))
    monkeypatch.setenv("PRENOISE_SGLANG", "1")
    for seed in seeds:
        req = make_request(h3, seed, 64, 4.0, steps=4, rollout=True, rollout_sde_type="cps")
        capture(h3, req)
    monkeypatch.delenv(noise_record.RECORD_ENV)


def test_recorded_sglang_rollouts_pass_rollout_check(
    h3: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin's records (`h3.initial.video`, `h3.initial.audio`, and `h3.rollout` once per
    stochastic step: 4 of 4 with cps): a rerun reproduces them, matched by the requests' stable
    names (`sglang#N`) or by seed, and two samples given one seed are a collision."""
    _recorded_rollouts(h3, monkeypatch, tmp_path / "a", [3, 4])
    _recorded_rollouts(h3, monkeypatch, tmp_path / "b", [3, 4])
    for match in ([], ["--match", "seed"]):
        status = main(["rollout-check", str(tmp_path / "a"), str(tmp_path / "b"), *match])
        out = capsys.readouterr().out
        assert status == 0 and "noise trusted: 12 draws of 2 requests on 1 rank," in out, out
    _recorded_rollouts(h3, monkeypatch, tmp_path / "c", [5, 5])
    assert main(["rollout-check", str(tmp_path / "c")]) == 1
    out = capsys.readouterr().out
    assert "collision" in out and "the same seed 5" in out, out
