from __future__ import annotations

import copy
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prenoise.cli.commands import main
from prenoise.verify import UncomparableError, compare, load_saved, tensor_sha256


@dataclass
class Inputs:
    video: torch.Tensor
    extra: list[torch.Tensor]
    steps: int


def make() -> dict[str, object]:
    g = torch.Generator().manual_seed(0)
    return {
        "inputs": Inputs(torch.randn(4, 8, generator=g), [torch.randn(3, generator=g)], 50),
        "scale": 0.5,
        "note": None,
    }


def test_identical_structures_are_equal() -> None:
    report = compare(make(), make())
    assert report.equal
    assert set(report.fields) == {"inputs.video", "inputs.extra.0", "inputs.steps", "scale", "note"}
    assert report.summary() == "bitwise equal: 5/5 fields"
    json.loads(report.to_json())


@pytest.mark.parametrize(
    ("mutate", "kind"),
    [
        (lambda d: d["inputs"].video.view(-1)[5].add_(1e-7), "values"),
        (lambda d: setattr(d["inputs"], "video", d["inputs"].video.t().contiguous().t()), "stride"),
        (lambda d: setattr(d["inputs"], "video", d["inputs"].video.double()), "dtype"),
        (None, "device"),
        (lambda d: setattr(d["inputs"], "video", d["inputs"].video.reshape(8, 4)), "shape"),
        (lambda d: d.__setitem__("added", 1), "missing in a"),
        (
            lambda d: setattr(d["inputs"], "video", d["inputs"].video[:, :].requires_grad_()),
            "requires_grad",
        ),
        (lambda d: d.__setitem__("scale", 0.5000001), "values"),
    ],
)
def test_each_kind_of_difference_is_detected(mutate: object, kind: str) -> None:
    a, b = make(), make()
    if kind == "device":
        b["inputs"].video = torch.empty(4, 8, device="meta")  # type: ignore[attr-defined]
    else:
        mutate(b)  # type: ignore[operator]
    report = compare(a, b)
    assert not report.equal
    assert any(kind in f.differences for f in report.differing), report.summary()
    assert "DIFFERENT" in report.summary()


def test_bit_level_equality_nan_payload_and_negative_zero() -> None:
    a = torch.tensor([0.0, float("nan")])
    b = torch.tensor([-0.0, float("nan")])
    assert torch.equal(a[:1], b[:1])  # value-equal, but not bit-equal
    assert not compare(a, b).equal
    nan2 = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert not compare(a[1:], nan2).equal
    assert not compare(0.0, -0.0).equal


def test_storage_offset_is_compared() -> None:
    base = torch.arange(20.0)
    report = compare(base[2:6].clone(), base[2:6])
    assert report.differing[0].differences == ["storage_offset"]


def test_sha256_is_of_contiguous_logical_bytes() -> None:
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert tensor_sha256(t.t()) == tensor_sha256(t.t().contiguous())
    assert tensor_sha256(t) != tensor_sha256(t.t().contiguous())


def _flip_one_bit(t: torch.Tensor, index: int = 0) -> torch.Tensor:
    out = t.clone()
    out.view(-1).view(torch.int32)[index] ^= 1
    return out


def test_one_bit_flip_is_a_difference() -> None:
    a = {"noise": torch.randn(64, 8, generator=torch.Generator().manual_seed(1))}
    b = {"noise": _flip_one_bit(a["noise"], 77)}
    report = compare(a, b)
    assert not report.equal
    assert report.differing[0].differences == ["values"]
    assert report.fields["noise"].a.sha256 != report.fields["noise"].b.sha256  # type: ignore[union-attr]


# -- mapping keys: matched by type and value, every field has its own label ------------------


def test_int_and_str_keys_never_collide() -> None:
    a, b, c = torch.zeros(3), torch.ones(3), torch.full((3,), 2.0)
    report = compare({1: a, "1": b}, {1: c, "1": b})
    assert not report.equal
    assert set(report.fields) == {"[1]", "['1']"}
    assert not report.fields["[1]"].equal and report.fields["['1']"].equal


@pytest.mark.parametrize("other", [1.0, True, "1"])
def test_keys_of_different_types_do_not_match(other: object) -> None:
    report = compare({1: 5}, {other: 5})
    assert not report.equal
    assert sorted(d for f in report.differing for d in f.differences) == [
        "missing in a",
        "missing in b",
    ]


def test_dotted_key_and_nested_path_have_different_labels() -> None:
    a = {"a.b": torch.zeros(2), "a": {"b": torch.zeros(2)}}
    b = {"a.b": torch.zeros(2), "a": {"b": torch.ones(2)}}
    report = compare(a, b)
    assert set(report.fields) == {"['a.b']", "a.b"}
    assert report.fields["['a.b']"].equal and not report.fields["a.b"].equal


def test_labels_stay_readable() -> None:
    data = {"conditions": [{"noise": 1}], 3: {"x": 2}, "with space": None, (1, "k"): 0.5}
    assert list(compare(data, copy.deepcopy(data)).fields) == [
        "conditions.0.noise",
        "[3].x",
        "['with space']",
        "[(1, 'k')]",
    ]


def test_distinct_nan_keys_keep_distinct_labels() -> None:
    nan_a = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    nan_b = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000002))[0]
    report = compare({nan_a: 1, nan_b: 2}, {nan_a: 1, nan_b: 3})
    assert len(report.fields) == 2 and len(report.differing) == 1


# -- property: every leaf is one field, and changing any one leaf is caught -------------------

_KEYS = st.one_of(
    st.integers(-2, 2),
    st.booleans(),
    st.floats(min_value=-2, max_value=2),
    st.text(alphabet="a1.[]'", max_size=3),
    st.tuples(st.integers(0, 1), st.text(alphabet="a.", max_size=2)),
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(),
    st.text(max_size=3),
    st.builds(lambda v: torch.tensor([v, 1.0]), st.floats(width=32)),
)
_TREES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=12,
)


def _leaf_paths(x: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(x, dict):
        return [p for k, v in x.items() for p in _leaf_paths(v, (*prefix, k))]
    if isinstance(x, list):
        return [p for i, v in enumerate(x) for p in _leaf_paths(v, (*prefix, i))]
    return [prefix]


def _perturbed(value: Any) -> Any:
    if value is None:
        return 0
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        (bits,) = struct.unpack("<Q", struct.pack("<d", value))
        return struct.unpack("<d", struct.pack("<Q", bits ^ 1))[0]
    if isinstance(value, str):
        return value + "x"
    return _flip_one_bit(value)


@settings(max_examples=300, deadline=None)
@given(tree=_TREES, data=st.data())
def test_any_single_leaf_change_is_caught_and_no_field_is_lost(tree: Any, data: Any) -> None:
    paths = _leaf_paths(tree)
    same = compare(tree, copy.deepcopy(tree))
    assert same.equal
    assert len(same.fields) == len(paths)  # one report per leaf: none overwritten another
    if not paths or paths == [()]:
        return
    path = data.draw(st.sampled_from(paths))
    changed = copy.deepcopy(tree)
    parent = changed
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = _perturbed(parent[path[-1]])
    report = compare(tree, changed)
    assert not report.equal
    assert len(report.differing) == 1 and len(report.fields) == len(paths)


# -- what cannot be compared is refused, not guessed ------------------------------------------


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (np.zeros(3), "numpy.ndarray"),
        ({1, 2}, "set"),
        (object(), "object"),
    ],
)
def test_unsupported_values_raise(value: object, words: str) -> None:
    with pytest.raises(UncomparableError, match=words) as info:
        compare({"x": [value]}, {"x": [value]})
    assert info.value.path == "x.0"


def test_unsupported_key_raises() -> None:
    key = object()
    with pytest.raises(UncomparableError, match="unsupported mapping key"):
        compare({key: 1}, {key: 1})


def test_reference_cycles_raise() -> None:
    a: list[Any] = [torch.zeros(1)]
    a.append(a)
    b: list[Any] = [torch.zeros(1)]
    b.append(b)
    with pytest.raises(UncomparableError, match="cycle"):
        compare(a, b)
    d: dict[str, Any] = {}
    d["self"] = {"again": d}
    with pytest.raises(UncomparableError, match="cycle") as info:
        compare(d, d)
    assert info.value.path == "self.again"


def test_shared_references_are_not_cycles() -> None:
    t = torch.ones(2)
    shared = [t]
    assert compare({"a": shared, "b": shared}, {"a": [t], "b": [t]}).equal


def test_deep_nesting_does_not_recurse() -> None:
    a: Any = 0
    b: Any = 0
    for _ in range(5000):
        a, b = [a], [b]
    assert compare(a, b).equal


# -- `prenoise compare`: 0 equal, 1 different, 2 cannot compare -------------------------------


def test_cli_compare_exit_codes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"x": torch.ones(20)}, a)
    torch.save({"x": torch.ones(20)}, b)
    assert main(["compare", str(a), str(b)]) == 0
    torch.save({"x": torch.ones(20) * 2}, b)
    out = tmp_path / "r.json"
    assert main(["compare", str(a), str(b), "--json", str(out)]) == 1
    assert json.loads(out.read_text())["equal"] is False


def test_cli_compare_one_bit_flip_exits_1(tmp_path: Path) -> None:
    noise = torch.randn(1000, generator=torch.Generator().manual_seed(3))
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"noise": noise}, a)
    torch.save({"noise": _flip_one_bit(noise, 999)}, b)
    assert main(["compare", str(a), str(b)]) == 1


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = tmp_path / "good.pt"
    torch.save({"x": torch.ones(1000)}, good)
    data = good.read_bytes()
    cases = {
        "missing": (tmp_path / "nope.pt", "no such file"),
        "directory": (tmp_path, "is a directory"),
        "empty": (tmp_path / "empty.pt", "empty file"),
        "truncated": (tmp_path / "trunc.pt", "truncated or corrupt"),
        "cut short": (tmp_path / "short.pt", "truncated or corrupt"),
        "text": (tmp_path / "text.pt", "truncated or corrupt"),
        "numpy": (tmp_path / "np.pt", "weights_only=True refuses"),
        "set": (tmp_path / "set.pt", "type set"),
    }
    cases["empty"][0].write_bytes(b"")
    cases["truncated"][0].write_bytes(data[: len(data) // 2])
    cases["cut short"][0].write_bytes(data[:-10])
    cases["text"][0].write_text("hello, not a tensor file\n")
    torch.save(np.zeros(3), cases["numpy"][0])
    torch.save({"s": {1, 2}}, cases["set"][0])
    return cases


@pytest.mark.parametrize(
    "case", ["missing", "directory", "empty", "truncated", "cut short", "text", "numpy", "set"]
)
def test_cli_compare_cannot_compare_exits_2_with_one_line(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad, words = _bad_inputs(tmp_path)[case]
    # A readable file with content compare refuses is compared with itself (against another
    # file the missing key alone would already make them differ).
    good = bad if case == "set" else tmp_path / "good.pt"
    for args in ([str(bad), str(good)], [str(good), str(bad)]):
        capsys.readouterr()
        assert main(["compare", *args]) == 2
        out = capsys.readouterr().out
        assert words in out and "Traceback" not in out
        assert len(out.strip().splitlines()) == 1, out


def test_load_saved_reads_a_good_file(tmp_path: Path) -> None:
    torch.save({"x": torch.arange(3)}, tmp_path / "f.pt")
    assert torch.equal(load_saved(tmp_path / "f.pt")["x"], torch.arange(3))
