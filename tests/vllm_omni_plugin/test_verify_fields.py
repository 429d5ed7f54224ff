"""`vllm-omni-verify` compares all of what `_build_denoise_inputs` returns (issue #20).

It compared only top-level tensors and the branch's own tensors and plain values: the tensors
nested in `branch.static_kwargs` (`*_pos_info.position_ids`, `packed_seq_params.cu_seqlens_q`,
`refiner_packed_seq_params.cu_seqlens_q`) and every non-tensor value below them (bools, ints,
the video token layout) went unchecked, and an object of another type was skipped silently.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch

from prenoise.integrations.vllm_omni.comparable import TYPE_KEY, ComparableCopy
from prenoise.integrations.vllm_omni.verification import (
    H3Request,
    VerifyResult,
    run_arm,
    verify_request,
)
from prenoise.verify import compare

STATIC = "denoise.branch.static_kwargs"
Mutation = Callable[[dict[str, Any]], None]


@pytest.fixture
def build_denoise_inputs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Mutation], None]]:
    """`wrap(mutate)`: upstream's `_build_denoise_inputs`, then `mutate(inputs)`, from now on."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    cls = upstream.MiniMaxH3Pipeline
    original = cls._build_denoise_inputs

    def wrap(mutate: Mutation) -> None:
        def mutated(pipe: Any, **kwargs: Any) -> dict[str, Any]:
            inputs = original(pipe, **kwargs)
            mutate(inputs)
            return inputs

        monkeypatch.setattr(cls, "_build_denoise_inputs", mutated)

    yield wrap


def plugin_on_mutated(
    request: H3Request, wrap: Callable[[Mutation], None], mutate: Mutation
) -> VerifyResult:
    """Plugin off as upstream computes it; plugin on with `mutate` applied to its inputs."""
    state = torch.get_rng_state()
    off = run_arm(request, plugin_on=False)
    torch.set_rng_state(state)
    wrap(mutate)
    on = run_arm(request, plugin_on=True)
    return VerifyResult.of(off, on)


def test_nested_values_are_fields(image_ref: Path) -> None:
    result = verify_request(H3Request((image_ref,), seed=3, steps=1))
    assert result.verified, result.summary()
    fields = result.report.fields
    for name in (
        f"{STATIC}.packed_seq_params.cu_seqlens_q",
        f"{STATIC}.refiner_packed_seq_params.cu_seqlens_q",
        f"{STATIC}.img_pos_info.position_ids",
        f"{STATIC}.audio_pos_info.position_ids",
        f"{STATIC}.text_pos_info.position_ids",
        f"{STATIC}.img_pos_for_infer_output_info.position_ids",
    ):
        assert len(fields[name].a.sha256) == 64, name  # type: ignore[union-attr]
    for name in (
        f"{STATIC}.skip_mask_out_condition",  # a bool
        f"{STATIC}.packed_seq_params.max_seqlen_q",  # ints
        f"{STATIC}.packed_seq_params.num_requests",
        f"{STATIC}.packed_seq_params.vsa_prefix_segments.0",  # in a tuple
        f"{STATIC}.video_token_layout.{TYPE_KEY}",  # a dataclass, and its type
        f"{STATIC}.video_token_layout.video_spans.0.start",  # a slots dataclass in a tuple
        f"{STATIC}.video_token_layout.video_spans.0.role",
        "denoise.branch.device",  # a torch.device
        "denoise.branch.seq_len",
        f"denoise.branch.{TYPE_KEY}",
        "denoise.sigmas_video.0",  # a float in a list
        "denoise.video_edit",  # None
    ):
        assert name in fields, name
    report = result.to_json()["fields"]
    assert report[f"{STATIC}.skip_mask_out_condition"]["value"] == "bool: False"


def set_static(path: str, value: Any) -> Mutation:
    def mutate(inputs: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = inputs["branch"].static_kwargs
        for part in parents:
            node = node[part]
        node[leaf] = value

    return mutate


def shift_first_span(inputs: dict[str, Any]) -> None:
    static = inputs["branch"].static_kwargs
    layout = static["video_token_layout"]
    span = dataclasses.replace(layout.video_spans[0], start=layout.video_spans[0].start + 1)
    static["video_token_layout"] = dataclasses.replace(layout, video_spans=(span,))


def bump_refiner_cu_seqlens(inputs: dict[str, Any]) -> None:
    inputs["branch"].static_kwargs["refiner_packed_seq_params"]["cu_seqlens_q"][2] += 1


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (set_static("skip_mask_out_condition", True), f"{STATIC}.skip_mask_out_condition"),
        (
            set_static("packed_seq_params.num_requests", 2),
            f"{STATIC}.packed_seq_params.num_requests",
        ),
        (shift_first_span, f"{STATIC}.video_token_layout.video_spans.0.start"),
        (bump_refiner_cu_seqlens, f"{STATIC}.refiner_packed_seq_params.cu_seqlens_q"),
    ],
    ids=["bool", "int", "dataclass-in-tuple", "nested-tensor"],
)
def test_a_nested_difference_makes_the_verdict_different(
    image_ref: Path,
    build_denoise_inputs: Callable[[Mutation], None],
    mutate: Mutation,
    field: str,
) -> None:
    result = plugin_on_mutated(
        H3Request((image_ref,), seed=1, steps=1), build_denoise_inputs, mutate
    )
    assert not result.equal and not result.verified
    assert {f.path for f in result.report.differing} - {"decoded.video", "decoded.audio"} == {field}
    assert result.summary().startswith("NOT VERIFIED: DIFFERENT")


def test_what_cannot_be_compared_fails_the_verdict(
    image_ref: Path, build_denoise_inputs: Callable[[Mutation], None]
) -> None:
    """A value of a type the walk cannot compare is listed, never skipped as if equal."""

    def add_opaque(inputs: dict[str, Any]) -> None:
        inputs["branch"].on_step = print  # code, not data
        inputs["branch"].static_kwargs["generator"] = torch.Generator()  # a C object
        inputs["branch"].lookup = {object(): 1}  # a key compare cannot match

    build_denoise_inputs(add_opaque)
    result = verify_request(H3Request((image_ref,), seed=1, steps=1))
    assert result.report.equal  # what was compared is equal...
    assert not result.equal and not result.verified  # ...but not everything was compared
    paths = [entry.split(": ")[1] for entry in result.uncompared]
    assert "denoise.branch.on_step" in paths
    assert f"{STATIC}.generator" in paths
    assert any(p.startswith("denoise.branch.lookup[<object object") for p in paths)
    assert len(result.uncompared) == 6  # three per arm
    assert "NOT COMPARED" in result.summary()
    assert result.to_json()["uncompared"] == result.uncompared


def test_values_are_copied_when_returned(
    image_ref: Path, build_denoise_inputs: Callable[[Mutation], None]
) -> None:
    """The report is what `_build_denoise_inputs` returned, not what the loop left behind."""
    returned: list[torch.Tensor] = []
    build_denoise_inputs(lambda inputs: returned.append(inputs["video_rows"]))
    arm = run_arm(H3Request((image_ref,), seed=1, steps=1), plugin_on=False)
    [rows] = returned
    before = arm.fields["denoise.video_rows"].clone()
    rows.add_(1.0)  # the pipeline's tensor changes later...
    assert torch.equal(arm.fields["denoise.video_rows"], before)  # ...the copy does not


# -- ComparableCopy, unit by unit -----------------------------------------------------------------


class Point(NamedTuple):
    x: int
    y: float


@dataclasses.dataclass(slots=True)
class Slotted:
    a: int
    b: tuple[int, ...]


class Colour(enum.Enum):
    RED = 1


class Plain:
    def __init__(self) -> None:
        self.name = "plain"
        self.tensor = torch.arange(3)


def copied(value: Any) -> tuple[Any, list[str]]:
    walk = ComparableCopy()
    return walk.copy(value, "v"), walk.uncompared


def test_objects_become_attribute_dicts_with_their_type() -> None:
    value, uncompared = copied(
        {
            "point": Point(1, 2.5),
            "ns": SimpleNamespace(flag=True),
            "slotted": Slotted(1, (2, 3)),
            "plain": Plain(),
            "colour": Colour.RED,
            "size": torch.Size([2, 3]),
            3: "an int key",
        }
    )
    assert uncompared == []
    assert value["point"] == {TYPE_KEY: f"{__name__}.Point", "x": 1, "y": 2.5}
    assert value["ns"] == {TYPE_KEY: "types.SimpleNamespace", "flag": True}
    assert value["slotted"] == {TYPE_KEY: f"{__name__}.Slotted", "a": 1, "b": (2, 3)}
    assert value["plain"][TYPE_KEY] == f"{__name__}.Plain"
    assert torch.equal(value["plain"]["tensor"], torch.arange(3))
    assert value["colour"] is Colour.RED
    assert value["size"] == {TYPE_KEY: "torch.Size", "items": [2, 3]}
    assert value[3] == "an int key"


def test_numpy_values_become_tensors_with_their_type() -> None:
    value, uncompared = copied([np.arange(4, dtype=np.int16), np.float32(0.5), np.float64(-0.0)])
    assert uncompared == []
    array, single, double = value
    assert array[TYPE_KEY] == "numpy.ndarray" and array["data"].dtype == torch.int16
    assert single[TYPE_KEY] == "numpy.float32" and single["data"].dtype == torch.float32
    assert double[TYPE_KEY] == "numpy.float64"  # a float subclass, still numpy's
    assert double["data"].dtype == torch.float64 and str(double["data"].item()) == "-0.0"


class Count(int):
    pass


def test_subclasses_of_plain_values_keep_their_type() -> None:
    value, uncompared = copied(Count(3))
    assert uncompared == [] and value == {TYPE_KEY: f"{__name__}.Count", "value": 3}
    assert type(value["value"]) is int


def test_container_and_object_types_are_compared() -> None:
    @dataclasses.dataclass
    class A:
        v: int

    @dataclasses.dataclass
    class B:
        v: int

    a, _ = copied({"seq": [1, 2], "obj": A(1)})
    b, _ = copied({"seq": (1, 2), "obj": B(1)})
    differing = {f.path: f.differences for f in compare(a, b).differing}
    assert differing == {"seq": ["type"], f"obj.{TYPE_KEY}": ["values"]}


def test_what_is_not_data_is_listed() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    value, uncompared = copied(
        {"fn": len, "cls": int, "gen": torch.Generator(), "lock": threading.Lock(), "cycle": cycle}
    )
    assert [u.split(": ")[0] for u in uncompared] == [
        "v.fn",
        "v.cls",
        "v.gen",
        "v.lock",
        "v.cycle.0",
    ]
    assert value["fn"].startswith("<not compared:")


def test_tensors_are_copied_with_their_layout() -> None:
    base = torch.arange(24.0).reshape(4, 6)
    view = base[1:, ::2]  # storage offset 6, strides (6, 2)
    expanded = torch.zeros(3).expand(2, 3)  # stride 0
    grad = torch.ones(2, requires_grad=True)
    (v, e, g), uncompared = copied((view, expanded, grad))
    assert uncompared == []
    assert (v.stride(), v.storage_offset(), v.shape) == (view.stride(), 6, view.shape)
    assert (
        torch.equal(v, view) and v.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    )
    assert e.stride() == (0, 1) and g.requires_grad
    base.add_(1)
    assert not torch.equal(v, view)  # an independent copy
    assert compare(copied(view)[0], copied(view)[0]).equal
