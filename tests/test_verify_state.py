"""`compare` sees every piece of a container's state, or refuses naming what it cannot see.

Round 3 (issue 35, HIGH 1 and MEDIUM 6): containers were compared by their items only, so a
dataclass attribute that is not a field, state set in `__post_init__`, attributes on
list/tuple/dict subclasses, a custom Mapping's hidden state, a defaultdict's factory, an
OrderedDict's key order and a state_dict's `_metadata` all went unseen ("bitwise equal"); a
mapping key nested 2,500 tuples deep was a RecursionError (exit 70).
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator, Mapping
from dataclasses import InitVar, dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from prenoise.cli.commands import main
from prenoise.verify import UncomparableError, compare


@dataclass
class Config:
    steps: int


@dataclass
class Scaled:
    values: list[int]
    unit: InitVar[str]

    def __post_init__(self, unit: str) -> None:
        self.scale = 1000 if unit == "km" else 1  # not a field: state __post_init__ sets


class Tagged(list):  # type: ignore[type-arg]
    pass


class TaggedTuple(tuple):  # type: ignore[type-arg]
    pass


class TaggedDict(dict):  # type: ignore[type-arg]
    pass


class Slotted(list):  # type: ignore[type-arg]
    __slots__ = ("owner",)


class Hiding(list):  # type: ignore[type-arg]
    """Yields nothing when iterated: its stored items must still be compared."""

    def __iter__(self) -> Iterator[Any]:
        return iter(())


def _tagged(cls: type, items: Any, **attrs: Any) -> Any:
    value = cls(items)
    for name, attr in attrs.items():
        setattr(value, name, attr)
    return value


def _slotted(items: list[int], owner: str | None) -> Slotted:
    value = Slotted(items)
    if owner is not None:
        value.owner = owner
    return value


def _with_extra(config: Config, extra: Any) -> Config:
    config.extra = extra  # type: ignore[attr-defined]
    return config


@pytest.mark.parametrize(
    ("a", "b", "label", "difference"),
    [
        (_with_extra(Config(4), 1), _with_extra(Config(4), 2), "x@extra", "values"),
        (_with_extra(Config(4), 1), Config(4), "x@extra", "missing in b"),
        (Scaled([1], "km"), Scaled([1], "m"), "x@scale", "values"),
        (_tagged(Tagged, [1], unit="m"), _tagged(Tagged, [1], unit="s"), "x@unit", "values"),
        (_tagged(TaggedTuple, (1,), n=1), _tagged(TaggedTuple, (1,), n=2), "x@n", "values"),
        (_tagged(TaggedDict, {"k": 1}, v=1), _tagged(TaggedDict, {"k": 1}), "x@v", "missing in b"),
        (_slotted([1], "a"), _slotted([1], "b"), "x@owner", "values"),
        (_slotted([1], "a"), _slotted([1], None), "x@owner", "type"),
        (Hiding([1]), Hiding([2]), "x.0", "values"),
        (
            collections.defaultdict(list, k=[1]),
            collections.defaultdict(tuple, k=[1]),
            "x@default_factory",
            "values",
        ),
        (
            collections.OrderedDict([("p", 1), ("q", 2)]),
            collections.OrderedDict([("q", 2), ("p", 1)]),
            "x",
            "key order",
        ),
    ],
    ids=[
        "dataclass-attribute",
        "dataclass-attribute-one-side",
        "post-init-state",
        "list-subclass-attribute",
        "tuple-subclass-attribute",
        "dict-subclass-attribute",
        "slot",
        "unset-slot",
        "overridden-iter",
        "defaultdict-factory",
        "ordereddict-key-order",
    ],
)
def test_state_beside_the_items_is_compared(a: Any, b: Any, label: str, difference: str) -> None:
    report = compare({"x": a}, {"x": b})
    assert not report.equal, report.summary()
    assert [(f.path, f.differences) for f in report.differing] == [(label, [difference])]
    assert compare({"x": a}, {"x": a}).equal


def test_a_plain_dicts_key_order_is_not_compared() -> None:
    assert compare({"p": 1, "q": 2}, {"q": 2, "p": 1}).equal


def test_defaultdict_factory_is_named_in_the_report() -> None:
    report = compare(collections.defaultdict(list), collections.defaultdict(int))
    assert (report.fields["@default_factory"].a, report.fields["@default_factory"].b) == (
        "list",
        "int",
    )


class Secret(Mapping[str, int]):
    """A Mapping whose `salt` changes nothing it yields."""

    def __init__(self, salt: int) -> None:
        self.salt = salt

    def __getitem__(self, key: str) -> int:
        return {"k": 1}[key]

    def __iter__(self) -> Iterator[str]:
        return iter(["k"])

    def __len__(self) -> int:
        return 1


def test_a_mapping_that_is_not_a_dict_is_refused_by_name() -> None:
    with pytest.raises(UncomparableError) as info:
        compare({"m": Secret(1)}, {"m": Secret(2)})
    assert str(info.value) == (
        "m: cannot compare a test_verify_state.Secret: a Mapping that is not a dict may hold "
        "state beyond the items it yields (convert it to dict)"
    )


def test_state_dict_metadata_and_key_order_on_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    saved = module.state_dict()
    torch.save(saved, tmp_path / "a.pt")
    saved._metadata["1"]["version"] = 1  # type: ignore[attr-defined]  # an old BatchNorm
    torch.save(saved, tmp_path / "b.pt")
    assert main(["compare", str(tmp_path / "a.pt"), str(tmp_path / "b.pt")]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "DIFFERENT: 1/" in out and "@_metadata['1'].version: values" in out, out

    reordered = collections.OrderedDict(reversed(list(module.state_dict().items())))
    reordered._metadata = module.state_dict()._metadata  # type: ignore[attr-defined]
    torch.save(reordered, tmp_path / "c.pt")
    assert main(["compare", str(tmp_path / "a.pt"), str(tmp_path / "c.pt")]) == 1
    assert "<root>: key order" in " ".join(capsys.readouterr().out.split())


def _deep_key(depth: int) -> tuple[Any, ...]:
    key: tuple[Any, ...] = ()
    for _ in range(depth):
        key = (key,)
    return key


def test_a_deep_key_is_refused_in_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # pickling 2,500 nested tuples recurses
    try:
        torch.save({_deep_key(2500): 1}, tmp_path / "a.pt")
    finally:
        sys.setrecursionlimit(limit)
    assert main(["compare", str(tmp_path / "a.pt"), str(tmp_path / "a.pt")]) == 2
    out = capsys.readouterr().out.strip()
    assert out == "error: <root>: a mapping key nested deeper than 100 tuples", out


def test_nesting_past_the_bound_is_refused() -> None:
    a: Any = 0
    for _ in range(10_001):
        a = [a]
    with pytest.raises(UncomparableError, match="nested deeper than 10000 containers"):
        compare(a, a)
