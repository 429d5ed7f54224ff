"""`guards/live_code.py`: the live function is the installed source's code, or it is named.

At the root of hardening round 4's class 1: a module written to a temporary folder, imported,
then changed in each way the running code can leave its source — replaced, `__code__`
swapped, wrapped, and bytecode that is not the source (an unchecked-hash `.pyc`, PEP 552).
"""

from __future__ import annotations

import functools
import importlib
import py_compile
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from prenoise.guards import live_code, source_digests

SOURCE = textwrap.dedent(
    """
    import torch


    def draw(n):
        return torch.randn(n)


    class Pipe:
        @torch.no_grad()
        def __call__(self, n):
            return draw(n)

        @staticmethod
        def size(n):
            return n + 1
    """
)


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    name = f"prenoise_live_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    live_code._forget()
    mod = importlib.import_module(name)
    yield mod
    sys.modules.pop(name, None)
    live_code._forget()


def test_the_installed_code_passes(module: ModuleType) -> None:
    for qualname in ("draw", "Pipe", "Pipe.__call__", "Pipe.size"):
        assert live_code.live_code_problem(module.__name__, qualname) is None, qualname


def test_a_replaced_function_is_named(module: ModuleType) -> None:
    module.draw = lambda n: torch.zeros(n)
    problem = live_code.live_code_problem(module.__name__, "draw")
    assert problem is not None and problem.startswith(f"draw ({module.__name__}) runs other code")


def test_a_swapped_code_object_is_named(module: ModuleType) -> None:
    module.draw.__code__ = (lambda n: torch.zeros(n)).__code__
    assert "runs other code" in str(live_code.live_code_problem(module.__name__, "draw"))


def test_a_runtime_wrapper_is_named_torch_decorators_are_not(module: ModuleType) -> None:
    inner = module.Pipe.__dict__["__call__"]

    @functools.wraps(inner)
    def traced(self: object, n: int) -> torch.Tensor:
        return inner(self, n)

    module.Pipe.__call__ = traced
    problem = live_code.live_code_problem(module.__name__, "Pipe.__call__")
    assert problem is not None and "traced" in problem
    assert "runs other code" in str(live_code.live_code_problem(module.__name__, "Pipe"))
    module.Pipe.__call__ = torch.no_grad()(inner)  # torch's own wrapper, twice: no draw changes
    assert live_code.live_code_problem(module.__name__, "Pipe.__call__") is None


def test_bytecode_that_is_not_its_source_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unchecked-hash .pyc (PEP 552) compiled from other code beside the reviewed source:
    Python runs the bytecode; the check compiles the source and sees the difference."""
    name = f"prenoise_pyc_{tmp_path.name.replace('-', '_')}"
    source = tmp_path / f"{name}.py"
    source.write_text(SOURCE.replace("torch.randn(n)", "torch.randn(n) + 1"))
    cached = Path(importlib.util.cache_from_source(str(source)))
    py_compile.compile(
        str(source),
        cfile=str(cached),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    source.write_text(SOURCE)  # the reviewed source; the .pyc is not checked against it
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    live_code._forget()
    try:
        mod = importlib.import_module(name)
        assert 1 in mod.draw.__code__.co_consts  # Python runs the bytecode, not the source
        problem = live_code.live_code_problem(name, "draw")
        assert problem is not None and "runs other code" in problem
    finally:
        sys.modules.pop(name, None)
        live_code._forget()


def test_same_code_compares_nested_code_and_constants() -> None:
    a = compile("def f():\n    def g():\n        return 1\n    return g\n", "x", "exec")
    b = compile("def f():\n    def g():\n        return 2\n    return g\n", "x", "exec")
    c = compile("def f():\n    def g():\n        return 1\n    return g\n", "y", "exec")
    assert not live_code.same_code(a, b)
    assert live_code.same_code(a, c)  # the filename is not the program


def test_torch_draws_replaced_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert live_code.torch_draws_problem() is None
    monkeypatch.setattr(torch, "randn", lambda *a, **k: None)
    assert live_code.torch_draws_problem() == "torch.randn is replaced at run time"
    monkeypatch.undo()
    monkeypatch.setattr(torch.Tensor, "normal_", lambda *a, **k: None)
    assert live_code.torch_draws_problem() == "torch.Tensor.normal_ is replaced at run time"


def test_an_integrations_own_wrappers_are_looked_through_and_no_other(module: ModuleType) -> None:
    """`unwrap` (the SGLang and vLLM-Omni plugins' own hook wrappers, proven by their code
    object) and `observing` (prenoise's own spies, while open) are looked through; the same
    wrapper shape not recognised by them is not the reviewed code."""
    real = module.draw

    def hook(original: object, n: int) -> torch.Tensor:
        return original(n)  # type: ignore[operator]

    def make(original: object) -> object:
        def installed(n: int) -> torch.Tensor:
            return hook(original, n)

        return installed

    own_code = make(None).__code__  # type: ignore[attr-defined]

    def unwrap(layer: object) -> object | None:
        if getattr(layer, "__code__", None) is not own_code:
            return None
        cells = dict(zip(own_code.co_freevars, layer.__closure__, strict=True))  # type: ignore[attr-defined]
        return cells["original"].cell_contents

    module.draw = make(real)
    name = module.__name__
    assert live_code.live_code_problem(name, "draw", unwrap) is None
    assert "runs other code" in str(live_code.live_code_problem(name, "draw"))
    module.draw = make(make(real))  # prenoise's wrapper twice: still upstream's code inside
    assert live_code.live_code_problem(name, "draw", unwrap) is None

    def foreign(n: int) -> torch.Tensor:
        return real(n) + 0.125

    module.draw = make(foreign)  # a foreign wrapper inside prenoise's
    assert "foreign" in str(live_code.live_code_problem(name, "draw", unwrap))
    module.draw = foreign
    with live_code.observing(foreign, real):
        assert live_code.live_code_problem(name, "draw", unwrap) is None
    assert "foreign" in str(live_code.live_code_problem(name, "draw", unwrap))
    module.draw = real


def test_reviewed_code_problem_skips_what_is_reviewed_as_absent(module: ModuleType) -> None:
    name = module.__name__
    digests = {f"{name}:draw": "abc", f"{name}:gone": source_digests.ABSENT}
    assert live_code.reviewed_code_problem(tuple(digests), None, digests.__getitem__) is None
    digests[f"{name}:gone"] = "def"  # defined per its digest, but not at run time: named
    found = live_code.reviewed_code_problem(tuple(digests), None, digests.__getitem__)
    assert found == (
        f"the code that runs is not the reviewed code: gone ({name}) is not defined at run time"
    )
