"""Verify: exact reports, labels, error texts and refusals (found by mutation testing)."""

from __future__ import annotations

import collections
import enum
import hashlib
import io
import json
import pickle
import re
import socket
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from prenoise.verify import (
    ComparisonReport,
    FieldReport,
    UncomparableError,
    compare,
    load_saved,
    nest_dotted,
    tensor_sha256,
)


def _raises(text: str) -> pytest.RaisesContext[UncomparableError]:
    return pytest.raises(UncomparableError, match=f"^{re.escape(text)}$")


def _sha(t: torch.Tensor) -> str:
    """sha256 of a CPU tensor's contiguous bytes, computed independently of the module."""
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def _info(t: torch.Tensor, **over: Any) -> dict[str, Any]:
    """The expected `TensorInfo` dict of a CPU tensor, with `over` replacing entries."""
    info = {
        "shape": list(t.shape),
        "dtype": str(t.dtype),
        "device": "cpu",
        "layout": "torch.strided",
        "stride": list(t.stride()),
        "storage_offset": t.storage_offset(),
        "requires_grad": False,
        "sha256": _sha(t),
    }
    info.update(over)
    return info


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass
class Point:
    x: int
    y: int


class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Shade(enum.Enum):
    RED = 1


def _same_named_enum() -> type[enum.Enum]:
    class Tone(enum.Enum):
        LOW = 1

    return Tone


class Meters(float):
    def __repr__(self) -> str:
        return f"Meters({float(self)!r})"


Pair = collections.namedtuple("Pair", "left right")


class LongRepr:
    def __repr__(self) -> str:
        return "k" * 400


# -- reports: exact dicts, JSON and summaries ---------------------------------------------------


def test_uncomparable_error_keeps_path_and_message() -> None:
    err = UncomparableError("a.b", "what went wrong")
    assert (str(err), err.path, err.message) == ("a.b: what went wrong", "a.b", "what went wrong")


def test_tensor_report_dict_is_exact() -> None:
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = a.clone()
    b[1, 2] = -1.0
    report = compare({"t": a}, {"t": b})
    assert report.to_dict() == {
        "equal": False,
        "summary": "DIFFERENT: 1/1 fields differ — t: values",
        "fields": {
            "t": {"equal": False, "differences": ["values"], "a": _info(a), "b": _info(b)},
        },
    }


def test_to_json_passes_its_options_to_json_dumps() -> None:
    report = compare({"x": 1, "t": torch.zeros(1)}, {"x": 1, "t": torch.zeros(1)})
    text = report.to_json(indent=2, sort_keys=True)
    assert text == json.dumps(report.to_dict(), indent=2, sort_keys=True)
    assert text != report.to_json()
    assert json.loads(text)["summary"] == "bitwise equal: 2/2 fields"


def test_leaf_reports_describe_both_sides() -> None:
    report = compare({"n": 1, "s": "x", "f": 0.5}, {"n": 2, "s": "x", "f": -0.5})
    assert {p: f.to_dict() for p, f in report.fields.items()} == {
        "n": {"equal": False, "differences": ["values"], "a": "int: 1", "b": "int: 2"},
        "s": {"equal": True, "differences": [], "a": "str: 'x'", "b": "str: 'x'"},
        "f": {"equal": False, "differences": ["values"], "a": "float: 0.5", "b": "float: -0.5"},
    }
    assert compare(3, 3).to_dict() == {
        "equal": True,
        "summary": "bitwise equal: 1/1 fields",
        "fields": {"<root>": {"equal": True, "differences": [], "a": "int: 3", "b": "int: 3"}},
    }


def test_long_values_are_described_in_200_characters() -> None:
    report = compare({"s": "x" * 300}, {})
    assert report.fields["s"].a == "str: '" + "x" * 194
    assert report.fields["s"].b is None


def test_summary_lists_five_differing_fields_then_counts_the_rest() -> None:
    a = {f"k{i}": i for i in range(7)}
    six = compare(a, {f"k{i}": i + (i < 6) for i in range(7)})
    assert six.summary() == (
        "DIFFERENT: 6/7 fields differ — k0: values; k1: values; k2: values; k3: values; "
        "k4: values (+1 more)"
    )
    five = compare(a, {f"k{i}": i + (i < 5) for i in range(7)})
    assert five.summary() == (
        "DIFFERENT: 5/7 fields differ — k0: values; k1: values; k2: values; k3: values; k4: values"
    )
    eight = compare({f"k{i}": i for i in range(8)}, {f"k{i}": -1 for i in range(8)})
    assert eight.summary().endswith("k4: values (+3 more)")


def test_summary_joins_the_kinds_of_one_field() -> None:
    report = compare({"t": torch.zeros(2, 3)}, {"t": torch.ones(3, 2)})
    assert report.summary() == "DIFFERENT: 1/1 fields differ — t: shape, stride, values"


def test_report_built_by_hand() -> None:
    report = ComparisonReport(
        {"p": FieldReport("p", True), "q": FieldReport("q", False, ["values"], "int: 1", "int: 2")}
    )
    assert report.differing == [report.fields["q"]]
    assert report.to_dict()["fields"]["p"] == {
        "equal": True,
        "differences": [],
        "a": None,
        "b": None,
    }


# -- tensors: layouts, dtypes, subclasses, digests ----------------------------------------------


def test_meta_tensor_digest_is_empty() -> None:
    assert tensor_sha256(torch.empty(3, device="meta")) == ""


def test_complex_tensor_digest_and_bits() -> None:
    t = torch.tensor([1 + 2j, -0.5j], dtype=torch.complex64)
    assert tensor_sha256(t) == _sha(torch.view_as_real(t))
    assert compare(t, t.clone()).equal
    other = t.clone()
    other[1] = complex(0.0, -0.25)
    report = compare({"c": t}, {"c": other})
    assert report.fields["c"].differences == ["values"]


def test_sparse_tensors_are_compared_on_their_storage() -> None:
    dense = torch.tensor([[0.0, 1.5], [2.0, 0.0]])
    sp = dense.to_sparse()
    stored = hashlib.sha256(
        sp._indices().numpy().tobytes() + sp._values().numpy().tobytes()
    ).hexdigest()
    assert tensor_sha256(sp) == stored
    report = compare({"s": sp}, {"s": dense.to_sparse()})
    sparse_info = _info(dense, layout="torch.sparse_coo", stride=[], storage_offset=0)
    sparse_info["sha256"] = stored
    assert report.fields["s"].to_dict() == {
        "equal": True,
        "differences": [],
        "a": sparse_info,
        "b": sparse_info,
    }
    changed = dense.clone()
    changed[1, 0] = 3.0
    assert compare(sp, changed.to_sparse()).fields["<root>"].differences == ["values"]


def test_bool_and_zero_dim_tensors() -> None:
    flags = torch.tensor([True, False, True])
    assert compare(flags, flags.clone()).equal
    assert compare(flags, torch.tensor([True, True, True])).differing[0].differences == ["values"]
    assert compare(torch.tensor(1.5), torch.tensor(1.5)).equal
    report = compare(torch.tensor(1.5), torch.tensor(-1.5))
    assert report.fields["<root>"].differences == ["values"]
    assert report.fields["<root>"].a.sha256 == _sha(torch.tensor(1.5))  # type: ignore[union-attr]


def test_tensor_subclass_is_a_type_difference() -> None:
    t = torch.arange(3.0)
    param = torch.nn.Parameter(t.clone(), requires_grad=False)
    assert compare(t, param).fields["<root>"].differences == ["type"]
    report = compare(t, torch.nn.Parameter(t.double(), requires_grad=False))
    assert report.fields["<root>"].differences == ["type", "dtype", "values"]


@pytest.mark.parametrize(
    ("a", "b", "kinds"),
    [
        (torch.zeros(2, 3), torch.zeros(3, 2), ["shape", "stride"]),  # same bytes
        (torch.zeros(2, 3), torch.ones(3, 2), ["shape", "stride", "values"]),
        (torch.zeros(2, dtype=torch.float16), torch.zeros(2), ["dtype", "values"]),
        (torch.tensor([1.0]), torch.tensor([0x3F800000], dtype=torch.int32), ["dtype"]),
    ],
)
def test_differently_shaped_or_typed_tensors_compare_their_bytes(
    a: torch.Tensor, b: torch.Tensor, kinds: list[str]
) -> None:
    report = compare({"t": a}, {"t": b})
    assert report.fields["t"].differences == kinds
    assert report.fields["t"].to_dict()["a"] == _info(a)
    assert report.fields["t"].to_dict()["b"] == _info(b)


@pytest.mark.parametrize(
    ("message", "reason"),
    [("", "RuntimeError"), ("first line\nsecond line", "first line"), ("only", "only")],
)
def test_unreadable_tensor_bits_are_refused(
    monkeypatch: pytest.MonkeyPatch, message: str, reason: str
) -> None:
    def unreadable(*args: object) -> list[str]:
        raise RuntimeError(message)

    monkeypatch.setattr("prenoise.verify.tensors._value_differences", unreadable)
    t = torch.zeros(2)
    with _raises(f"x.0: cannot read the tensors' bits ({reason})") as info:
        compare({"x": [t]}, {"x": [t]})
    assert info.value.path == "x.0"
    assert info.value.message == f"cannot read the tensors' bits ({reason})"


# -- plain values: floats and complex numbers on their bits, enums by identity -------------------


def test_complex_leaves_are_compared_on_both_parts() -> None:
    assert compare(1 + 2j, 1 + 2j).equal
    assert not compare(1 + 2j, 1 - 2j).equal
    assert not compare(3 + 2j, 1 + 2j).equal
    assert not compare(complex(1.0, 0.0), complex(1.0, -0.0)).equal
    report = compare({1 + 2j: 1}, {1 + 2j: 2})
    assert list(report.fields) == ["[(1+2j)]"]


def test_enum_leaves() -> None:
    assert compare(Color.RED, Color.RED).equal
    report = compare({"c": Color.RED}, {"c": Color.GREEN})
    assert report.fields["c"].to_dict() == {
        "equal": False,
        "differences": ["values"],
        "a": f"{_name(Color)}: <Color.RED: 1>",
        "b": f"{_name(Color)}: <Color.GREEN: 2>",
    }


# -- mapping keys ---------------------------------------------------------------------------------


def test_nan_key_label_shows_its_bits() -> None:
    nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    assert list(compare({nan: 1}, {nan: 1}).fields) == ["[nan:0x7ff8000000000001]"]


def test_bracket_segments_join_without_a_dot() -> None:
    data = {"a": {1: 0, "b": {(1, "k"): 0}, "c": [{2.5: 0}]}}
    assert list(compare(data, {"a": {1: 0, "b": {(1, "k"): 0}, "c": [{2.5: 0}]}}).fields) == [
        "a[1]",
        "a.b[(1, 'k')]",
        "a.c.0[2.5]",
    ]


def test_keys_of_the_same_value_but_another_type_do_not_match() -> None:
    report = compare({1.0: 0, Color.RED: 0}, {1: 0, Shade.RED: 0})
    assert {p: f.differences for p, f in report.fields.items()} == {
        "[1.0]": ["missing in b"],
        "[<Color.RED: 1>]": ["missing in b"],
        "[1]": ["missing in a"],
        "[<Shade.RED: 1>]": ["missing in a"],
    }
    # A float subclass's == and hash are its own: refused, as a key and as a value.
    for a in ({Meters(1.0): 0}, {"k": Meters(1.0)}):
        with _raises(
            f"{'<root>' if Meters(1.0) in a else 'k'}: cannot compare values of type "
            f"{_name(Meters)}, a subclass of float (its == and state are its own; convert it "
            "to float)"
        ):
            compare(a, a)


def test_unsupported_keys_are_refused_with_their_path() -> None:
    key = LongRepr()
    text = f"unsupported mapping key type {_name(LongRepr)}: " + "k" * 400
    with _raises(f"<root>: {text[:300]}") as info:
        compare({key: 1}, {key: 1})
    assert (info.value.path, info.value.message) == ("<root>", text[:300])
    with _raises(f"x: {text[:300]}") as info:
        compare({"x": {(1, key): 1}}, {"x": {(1, key): 1}})
    assert info.value.path == "x"
    with _raises(f"<root>: {text[:300]}") as info:
        compare({(1, (2, key)): 1}, {})
    assert info.value.path == "<root>"
    with _raises(f"y: {text[:300]}") as info:  # only b's key is unsupported
        compare({"y": {}}, {"y": {key: 1}})
    assert info.value.path == "y"


def test_named_tuple_keys_are_refused() -> None:
    key = Pair(1, 2)
    with _raises(f"y: unsupported mapping key type {_name(Pair)}: Pair(left=1, right=2)"):
        compare({"y": {key: 0}}, {"y": {key: 0}})


def test_keys_that_cannot_be_told_apart_are_refused() -> None:
    low_a, low_b = _same_named_enum().LOW, _same_named_enum().LOW  # type: ignore[attr-defined]
    with _raises("<root>: two mapping keys cannot be told apart (<Tone.LOW: 1>)") as info:
        compare({low_a: 1, low_b: 2}, {})
    assert (info.value.path, info.value.message) == (
        "<root>",
        "two mapping keys cannot be told apart (<Tone.LOW: 1>)",
    )
    with _raises("m.n: two mapping keys cannot be told apart (<Tone.LOW: 1>)"):
        compare({"m": {"n": {low_a: 1, low_b: 2}}}, {"m": {"n": {}}})
    with _raises("m: two mapping keys cannot be told apart (<Tone.LOW: 1>)"):
        compare({"m": {}}, {"m": {low_a: 1, low_b: 2}})
    nan_1, nan_2 = float("nan"), float("nan")
    with _raises("<root>: two mapping keys cannot be told apart (nan)"):
        compare({nan_1: 1, nan_2: 2}, {})


def test_fields_sharing_a_label_across_sides_are_refused() -> None:
    low_a, low_b = _same_named_enum().LOW, _same_named_enum().LOW  # type: ignore[attr-defined]
    with _raises("[<Tone.LOW: 1>]: two different fields have the same label") as info:
        compare({low_a: 0}, {low_b: 0})
    assert (info.value.path, info.value.message) == (
        "[<Tone.LOW: 1>]",
        "two different fields have the same label",
    )


# -- the walk: types, missing keys, refusals, cycles ------------------------------------------


def test_type_mismatch_reports_describe_both_sides() -> None:
    a = {"t": torch.zeros(2, 3), "l": [1, 2], "p": Point(1, 2), "n": None}
    b = {"t": [1, 2], "l": (1, 2), "p": {"x": 1}, "n": 0}
    report = compare(a, b)
    assert {p: f.to_dict() for p, f in report.fields.items()} == {
        "t": {
            "equal": False,
            "differences": ["type"],
            "a": "tensor[2, 3] torch.float32",
            "b": "list of 2 items",
        },
        "l": {
            "equal": False,
            "differences": ["type"],
            "a": "list of 2 items",
            "b": "tuple of 2 items",
        },
        "p": {"equal": False, "differences": ["type"], "a": _name(Point), "b": "dict of 1 items"},
        "n": {"equal": False, "differences": ["type"], "a": "NoneType: None", "b": "int: 0"},
    }
    assert compare(torch.zeros(1), 0.0).fields["<root>"].differences == ["type"]


def test_missing_keys_are_reported_at_their_full_label() -> None:
    a = {"outer": {"only_a": Point(1, 2), 7: torch.zeros(2), "both": 1}}
    b = {"outer": {"both": 1, "only_b": [1, 2, 3], (1,): "x"}}
    report = compare(a, b)
    assert {p: f.to_dict() for p, f in report.fields.items()} == {
        "outer.only_a": {
            "equal": False,
            "differences": ["missing in b"],
            "a": _name(Point),
            "b": None,
        },
        "outer[7]": {
            "equal": False,
            "differences": ["missing in b"],
            "a": "tensor[2] torch.float32",
            "b": None,
        },
        "outer.both": {"equal": True, "differences": [], "a": "int: 1", "b": "int: 1"},
        "outer.only_b": {
            "equal": False,
            "differences": ["missing in a"],
            "a": None,
            "b": "list of 3 items",
        },
        "outer[(1,)]": {
            "equal": False,
            "differences": ["missing in a"],
            "a": None,
            "b": "str: 'x'",
        },
    }


@pytest.mark.parametrize("side", ["a", "b"])
def test_unsupported_values_are_refused_on_either_side(side: str) -> None:
    a: dict[str, Any] = {"x": {1}}
    b: dict[str, Any] = {"x": 1}
    if side == "b":
        a, b = b, a
    with _raises("x: cannot compare values of type set") as info:
        compare(a, b)
    assert info.value.path == "x"


def test_numpy_values_get_a_hint() -> None:
    text = "cannot compare values of type numpy.ndarray (convert it with torch.from_numpy)"
    with _raises(f"v: {text}") as info:
        compare({"v": np.zeros(2)}, {"v": np.zeros(2)})
    assert info.value.message == text
    with _raises("<root>: cannot compare values of type object"):
        compare(object(), 1)


def test_containers_shared_on_both_sides_are_not_cycles() -> None:
    s, t = [1, 2], [1, 2]
    report = compare({"a": s, "b": s}, {"a": t, "b": t})
    assert report.equal and list(report.fields) == ["a.0", "a.1", "b.0", "b.1"]
    assert compare([s, s], [s, s]).equal


def test_a_cycle_on_one_side_only_ends_where_the_other_side_does() -> None:
    looped: list[Any] = []
    looped.append(looped)
    expected = {"equal": False, "differences": ["type"], "a": "int: 0", "b": "list of 1 items"}
    assert compare([[0]], looped).fields["0.0"].to_dict() == expected
    swapped = {"equal": False, "differences": ["type"], "a": "list of 1 items", "b": "int: 0"}
    assert compare(looped, [[0]]).fields["0.0"].to_dict() == swapped


def test_cycles_are_refused_with_their_label() -> None:
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    a["self"], b["self"] = a, b  # each contains itself
    with _raises("self: reference cycle (a container contains itself)") as info:
        compare(a, b)
    assert info.value.path == "self"


# -- nest_dotted ------------------------------------------------------------------------------


def test_nest_dotted() -> None:
    t = torch.zeros(1)
    nested = nest_dotted(
        {"denoise.text": t, "plain": 3, "denoise.image.x": 1, "denoise.image.y": 2}
    )
    assert nested == {"denoise": {"text": t, "image": {"x": 1, "y": 2}}, "plain": 3}
    assert nested["denoise"]["text"] is t
    assert nest_dotted({}) == {}
    report = compare(nested, nest_dotted({"denoise.text": t, "denoise.image.x": 1}))
    assert {p: f.differences for p, f in report.fields.items()} == {
        "denoise.text": [],
        "denoise.image.x": [],
        "denoise.image.y": ["missing in b"],
        "plain": ["missing in b"],
    }


# -- load_saved -------------------------------------------------------------------------------


def test_load_saved_refusals_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pt"
    with _raises(f"{missing}: no such file") as info:
        load_saved(missing)
    assert info.value.path == str(missing)
    with _raises(f"{tmp_path}: is a directory, not a torch.save file") as info:
        load_saved(tmp_path)
    assert info.value.path == str(tmp_path)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with _raises(f"{empty}: empty file, not a torch.save file") as info:
        load_saved(str(empty))
    assert info.value.path == str(empty)


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs Unix sockets")
def test_load_saved_unopenable_file(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with _raises(f"{path}: not a regular file (a socket)") as info:  # said before opening
            load_saved(path)
    assert info.value.path == str(path)


def test_load_saved_maps_storages_to_the_cpu(tmp_path: Path) -> None:
    buf = io.BytesIO()
    torch.save({"x": torch.arange(3.0)}, buf)
    source = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    path = tmp_path / "cuda.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        for entry in source.infolist():
            data = source.read(entry.filename)
            if entry.filename.endswith("data.pkl"):  # claim the storage lives on a CUDA device
                assert data.count(b"X\x03\x00\x00\x00cpu") == 1
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x04\x00\x00\x00cuda")
            out.writestr(entry.filename, data)
    loaded = load_saved(path)
    assert loaded["x"].device == torch.device("cpu")
    assert torch.equal(loaded["x"], torch.arange(3.0))


def test_load_saved_is_weights_only_even_when_the_environment_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "np.pt"
    torch.save({"n": np.zeros(3)}, path)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    pattern = (
        rf"^{re.escape(str(path))}: not a readable torch\.save file: holds objects "
        r"weights_only=True refuses \(Unsupported global: GLOBAL numpy\.[\w.]+ was not an "
        r"allowed global by default\)$"
    )
    with pytest.raises(UncomparableError, match=pattern) as info:
        load_saved(path)
    assert info.value.path == str(path)


def _failing_load(exc: Exception) -> Any:
    def load(*args: Any, **kwargs: Any) -> Any:
        raise exc

    return load


_ESC = "\x1b[1m"
_OFF = "\x1b[0m"


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (
            pickle.UnpicklingError(
                f"Weights only load failed. {_ESC}Trust it?{_OFF} Really.\n"
                f"\t{_ESC}WeightsUnpickler error: {_OFF}Unsupported global: GLOBAL m.C. Use "
                "add_safe_globals. WeightsUnpickler error: again\n\nCheck the docs."
            ),
            "holds objects weights_only=True refuses (Unsupported global: GLOBAL m.C)",
        ),
        (
            pickle.UnpicklingError("WeightsUnpickler error: inner WeightsUnpickler error: outer"),
            "holds objects weights_only=True refuses (inner WeightsUnpickler error: outer)",
        ),
        (
            pickle.UnpicklingError("x\nWeightsUnpickler error: " + "d" * 400),
            ("holds objects weights_only=True refuses (" + "d" * 400)[:300],
        ),
        (
            RuntimeError(f"{_ESC}Zip archive{_OFF} is broken. Really broken.\nSecond line."),
            "truncated or corrupt (RuntimeError: Zip archive is broken)",
        ),
        (EOFError(), "truncated or corrupt (EOFError: )"),
        (EOFError("  \n "), "truncated or corrupt (EOFError: )"),
        (KeyError(101), "truncated or corrupt (KeyError: 101)"),
        (ValueError("v" * 400), ("truncated or corrupt (ValueError: " + "v" * 400)[:300]),
    ],
)
def test_load_failure_reasons_are_one_informative_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: Exception, reason: str
) -> None:
    path = tmp_path / "bad.pt"
    path.write_bytes(b"not empty")
    monkeypatch.setattr(torch, "load", _failing_load(exc))
    with _raises(f"{path}: not a readable torch.save file: {reason}") as info:
        load_saved(path)
    assert info.value.path == str(path)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_quantized_tensors_are_refused_not_read_as_bytes() -> None:
    q1 = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8)
    q2 = torch.quantize_per_tensor(torch.full((4,), 2.0), 0.2, 0, torch.qint8)
    assert torch.equal(q1.int_repr(), q2.int_repr())  # same bytes, different values
    for a, b in ((q1, q2), (q1, q1), (torch.ones(4), q1)):
        with pytest.raises(UncomparableError) as raised:
            compare({"x": a}, {"x": b})
        assert str(raised.value) == (
            "x: quantized tensors are not supported; compare t.int_repr() and "
            "t.q_scale()/t.q_zero_point() (or t.dequantize()) instead"
        )


def test_a_faked_class_does_not_pass_for_a_leaf() -> None:
    class ClaimsInt:
        __class__ = int  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    assert isinstance(ClaimsInt(), int)
    with pytest.raises(UncomparableError, match=r"^x: cannot compare values of type "):
        compare({"x": ClaimsInt()}, {"x": ClaimsInt()})


def test_a_load_failure_reason_on_the_next_line_is_kept() -> None:
    from prenoise.verify import _load_failure

    exc = RuntimeError("Weights only load failed.\nWeightsUnpickler error:\n  Bad opcode 0. More.")
    assert _load_failure(exc) == "holds objects weights_only=True refuses (Bad opcode 0)"
    bare = RuntimeError("WeightsUnpickler error:")
    assert _load_failure(bare) == "holds objects weights_only=True refuses (no reason given)"
