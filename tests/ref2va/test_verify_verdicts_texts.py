"""The Ref2VA verdict's exact texts and JSON, built from field reports (no pipeline run)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from prenoise.preparation.prediction import PredictionEvent
from prenoise.ref2va.pipeline import PreparedOutput
from prenoise.ref2va.verification import (
    INPUT_FIELDS,
    NOISE_FIELDS,
    VerifyResult,
    prepared_fields,
    verify_recipe,
)
from prenoise.verify import FieldReport, TensorInfo


def _result(*, equal: dict[str, bool], rng: bool = True) -> VerifyResult:
    fields = {}
    for name, same in equal.items():
        info = TensorInfo.of(torch.arange(6, dtype=torch.float32).view(2, 3))
        fields[name] = FieldReport(name, same, [] if same else ["values"], info, info)
    return VerifyResult(
        equal=all(equal.values()) and rng,
        rng_state_unchanged=rng,
        fields=fields,
        used_prepared_noise=True,
        prediction_events=["video: predicted (1,), actual (2,)"],
    )


def test_summary_reads_exactly() -> None:
    assert _result(equal={"a": True, "b": True}).summary() == (
        "bitwise equal: 2/2 fields; global RNG unchanged"
    )
    assert _result(equal={"a": False, "b": True, "c": False}, rng=False).summary() == (
        "DIFFERENT (a, c): 1/3 fields; global RNG CHANGED"
    )


def test_json_carries_every_key_and_the_serial_digest() -> None:
    result = _result(equal={"a": True, "b": False})
    info = result.fields["a"].a
    assert isinstance(info, TensorInfo)
    entry = {
        "sha256": info.sha256,
        "shape": [2, 3],
        "dtype": "torch.float32",
        "device": "cpu",
        "stride": [3, 1],
    }
    assert result.to_json() == {
        "equal": False,
        "rng_state_unchanged": True,
        "used_prepared_noise": True,
        "prediction_events": ["video: predicted (1,), actual (2,)"],
        "fields": {
            "a": {"equal": True, "differences": [], **entry},
            "b": {"equal": False, "differences": ["values"], **entry},
        },
    }
    missing = VerifyResult(True, True, {"x": FieldReport("x", True, [], "None", "None")}, False, [])
    assert missing.to_json()["fields"] == {"x": {"equal": True, "differences": []}}


def test_prepared_fields_refuses_outputs_without_noise() -> None:
    out = PreparedOutput(index=0, seed=0, inputs=None, used_prepared_noise=False)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"^verification needs outputs prepared with keep_noise=True$"
    ):
        prepared_fields([out])


def _output(index: int, value: float) -> PreparedOutput:
    def tensor() -> torch.Tensor:
        return torch.full((2,), value)

    noise = SimpleNamespace(**{name: tensor() for name in NOISE_FIELDS})
    inputs = SimpleNamespace(**{name: tensor() for name in INPUT_FIELDS})
    return PreparedOutput(index, 0, inputs, True, noise)  # type: ignore[arg-type]


def test_prepared_fields_prefix_every_output_after_the_first() -> None:
    fields = prepared_fields([_output(0, 0.0), _output(1, 1.0)])
    assert list(fields) == [
        *NOISE_FIELDS,
        *(f"denoise.{n}" for n in INPUT_FIELDS),
        *(f"output1.{n}" for n in NOISE_FIELDS),
        *(f"output1.denoise.{n}" for n in INPUT_FIELDS),
    ]
    assert all(float(t[0]) == 1.0 for name, t in fields.items() if name.startswith("output1."))


class _FakePipeline:
    """Two arms whose outputs the test controls; records the arms it was asked for."""

    def __init__(self, overlapped_value: float) -> None:
        self.arms: list[str] = []
        self.overlapped_value = overlapped_value

    def prepare_outputs(
        self,
        plan: object,
        arm: str = "overlapped",
        *,
        keep_noise: bool = False,
        tracer: object = None,
    ) -> tuple[list[PreparedOutput], list[PredictionEvent]]:
        assert keep_noise
        self.arms.append(arm)
        value = 0.0 if arm == "serial" else self.overlapped_value
        return [_output(0, value)], [PredictionEvent("video", (1,), (2,))]


@pytest.mark.parametrize(("overlapped_value", "equal"), [(0.0, True), (-0.0, False)])
def test_verify_recipe_runs_both_arms_and_reports_their_events(
    overlapped_value: float, equal: bool
) -> None:
    pipeline = _FakePipeline(overlapped_value)
    result = verify_recipe(pipeline, plan=None)  # type: ignore[arg-type]
    assert pipeline.arms == ["serial", "overlapped"]
    assert result.prediction_events == ["video: predicted (1,), actual (2,)"]
    assert result.equal is equal  # -0.0 == 0.0, but not bitwise
    assert result.rng_state_unchanged and result.used_prepared_noise
