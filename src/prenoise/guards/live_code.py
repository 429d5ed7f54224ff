"""Whether the code that will run is the installed source code: the live check beside digests.

Source digests (`source_digests`) decide support by the installed *files*. What Python runs is
the live function objects: a function replaced at run time (an "offset noise" patch), a swapped
`__code__`, a wrapper put around a method after import, or bytecode that is not its source (an
unchecked-hash `.pyc`, PEP 552) all run other code than the file says. `live_code_problem`
closes that gap for one relied-on function: the object found at its place (`module:qualname`,
looked up live) must carry exactly the code object that compiling the installed source file
gives for that qualname — compared field by field (bytecode, constants recursively, names,
variables, flags, first line, line and exception tables) — possibly under decorators whose code
is one of `TRUSTED_WRAPPER_CODES` (torch's `no_grad` / `inference_mode` wrapper), each followed
through its `__wrapped__`.

Each code object is compared once (code objects are immutable: the verdict is cached by the
object, kept alive by the cache so its id is never reused); every call walks the live objects
again, so a `__code__` swapped back and forth is seen each time. A class named by a key is
checked method by method: every function its source body defines.

An integration whose own hooks wrap upstream's functions (SGLang's `HookRegistry` wrappers,
vLLM-Omni's patched names) passes `unwrap`: given one layer, the function it wraps when that
layer is the integration's own wrapper (proven by its code object and its closure, not by
`__wrapped__` alone), else None. Any other layer — a foreign plugin's wrapper, a runtime patch —
is not the reviewed code. prenoise's own observers (a spy that records what a relied-on
function returns and changes nothing: `vllm-omni-verify`'s probes, `sglang-verify`'s condition
spy) are looked through while `observing` holds them.
"""

from __future__ import annotations

import ast
import sys
import threading
import tokenize
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prenoise.guards.source_digests import (
    ABSENT,
    CodeUnavailable,
    definition,
    installed_source_file,
)

__all__ = [
    "TRUSTED_WRAPPER_CODES",
    "Unwrap",
    "is_source_code",
    "live_code_problem",
    "live_keys_problem",
    "live_object",
    "observing",
    "reviewed_code_problem",
    "same_code",
    "torch_draws_problem",
]


def _torch_wrapper_codes() -> frozenset[types.CodeType]:
    """The code of the wrappers torch's context-manager decorators put around a function."""
    try:
        import torch
    except ImportError:  # pragma: no cover - prenoise requires torch
        return frozenset()

    def probe() -> None:
        return None

    codes = set()
    for decorator in (torch.no_grad(), torch.inference_mode(), torch.enable_grad()):
        wrapped = decorator(probe)
        code = getattr(wrapped, "__code__", None)
        if isinstance(code, types.CodeType) and code is not probe.__code__:
            codes.add(code)
    return frozenset(codes)


TRUSTED_WRAPPER_CODES = _torch_wrapper_codes()
"""Decorator wrappers a relied-on function may sit under (they change no draw): torch's
`no_grad()` / `inference_mode()` / `enable_grad()` context wrapper."""

Unwrap = Callable[[object], object | None]
"""An integration's own-wrapper test: the function a layer wraps when the layer is the
integration's own hook wrapper, else None (`live_code_problem`'s `unwrap`)."""

_lock = threading.Lock()
_observers: dict[int, tuple[object, object]] = {}  # id(observer) -> (observer, what it calls)
_compiled: dict[str, types.CodeType] = {}  # module -> its installed source compiled
# (id(code), module, qualname) -> (code, whether it is the source's)
_same: dict[tuple[int, str, str], tuple[types.CodeType, bool]] = {}
_members: dict[
    tuple[str, str], tuple[str, ...] | None
] = {}  # a class key's methods; None: a function


def _fields(code: types.CodeType) -> tuple[Any, ...]:
    names = (
        "co_code",
        "co_names",
        "co_varnames",
        "co_freevars",
        "co_cellvars",
        "co_flags",
        "co_argcount",
        "co_posonlyargcount",
        "co_kwonlyargcount",
        "co_firstlineno",
        "co_name",
        "co_linetable",
        "co_exceptiontable",
        "co_qualname",
    )
    return tuple(getattr(code, name, None) for name in names)


def same_code(a: types.CodeType, b: types.CodeType) -> bool:
    """Whether two code objects hold the same program (filename aside): bytecode, names,
    variables, flags, argument counts, first line, line/exception tables and every constant,
    nested code objects compared the same way."""
    if _fields(a) != _fields(b) or len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts, strict=True):
        if isinstance(x, types.CodeType) or isinstance(y, types.CodeType):
            if not (isinstance(x, types.CodeType) and isinstance(y, types.CodeType)):
                return False
            if not same_code(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _module_code(module: str) -> types.CodeType:
    """`module`'s installed source file compiled as the import system would (cached)."""
    with _lock:
        code = _compiled.get(module)
    if code is None:
        path = installed_source_file(module)
        if path is None:
            raise CodeUnavailable(f"module {module} is not installed")
        try:
            with tokenize.open(path) as file:
                source = file.read()
        except OSError as error:
            raise CodeUnavailable(f"the source of {module} cannot be read: {error}") from None
        code = compile(source, str(path), "exec", dont_inherit=True)
        with _lock:
            _compiled[module] = code
    return code


def _nested(code: types.CodeType) -> Iterator[types.CodeType]:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield const
            yield from _nested(const)


def _compiled_function(module: str, qualname: str, firstlineno: int) -> types.CodeType | None:
    """The code object compiling `module` gives for `qualname` defined at `firstlineno`."""
    name = qualname.rsplit(".", 1)[-1]
    for code in _nested(_module_code(module)):
        same_place = code.co_name == name and code.co_firstlineno == firstlineno
        if same_place and getattr(code, "co_qualname", qualname) == qualname:
            return code
    return None


def is_source_code(code: types.CodeType, module: str | None) -> bool:
    """Whether `code` is exactly what `module`'s installed source compiles to (for the
    function of that qualname at that line)."""
    if not module:
        return False
    qualname = getattr(code, "co_qualname", code.co_name)
    try:
        expected = _compiled_function(module, qualname, code.co_firstlineno)
    except (CodeUnavailable, SyntaxError, ValueError, OSError):
        return False
    return expected is not None and same_code(code, expected)


def live_object(module: str, qualname: str) -> object | None:
    """The object at `qualname` in the loaded module `module`, looked up as it is now (class
    attributes from the class's own `__dict__`); None when the module is not loaded (then
    nothing of it can run)."""
    obj: object = sys.modules.get(module)
    if obj is None:
        return None
    for part in qualname.split("."):
        space = vars(obj) if isinstance(obj, type) else obj.__dict__
        if part not in space:
            raise LookupError(f"{qualname} ({module}) is not defined at run time")
        obj = space[part]
    return obj


def _functions(obj: object) -> list[object]:
    """The functions a class attribute runs: itself, a static/class method's function, a
    property's accessors."""
    if isinstance(obj, staticmethod | classmethod):
        return [obj.__func__]
    if isinstance(obj, property):
        return [f for f in (obj.fget, obj.fset, obj.fdel) if f is not None]
    return [obj]


def _is_compiled(code: types.CodeType, module: str, qualname: str) -> bool:
    """Whether `code` is what `module`'s installed source compiles to for `qualname` (cached
    by the code object)."""
    key = (id(code), module, qualname)
    with _lock:
        cached = _same.get(key)
    if cached is not None and cached[0] is code:
        return cached[1]
    same = False
    if getattr(code, "co_qualname", qualname) == qualname:
        expected = _compiled_function(module, qualname, code.co_firstlineno)
        same = expected is not None and same_code(code, expected)
    with _lock:
        _same[key] = (code, same)
    return same


def _function_problem(
    obj: object, module: str, qualname: str, unwrap: Unwrap | None = None
) -> str | None:
    """Why the live function `obj` is not the source's `qualname` (None: it is).

    Decorator layers are followed through `__wrapped__` where the wrapper is torch's context
    wrapper (`TRUSTED_WRAPPER_CODES`) or a function of the installed source of the relied-on
    code's own top package (a diffusers decorator), and through the integration's own hook
    wrappers (`unwrap`); the innermost function must be what the installed source compiles to
    for `qualname`."""
    top = module.split(".", 1)[0]
    for func in _functions(obj):
        for _layer in range(8):
            inner = _observed(func) or (unwrap(func) if unwrap is not None else None)
            if inner is not None:
                func = inner
                continue
            code = getattr(func, "__code__", None)
            if not isinstance(code, types.CodeType):
                kind = type(func).__name__
                return f"{qualname} ({module}) is a {kind} at run time, not a function"
            if _is_compiled(code, module, qualname):
                break
            wrapper_module = getattr(func, "__module__", None) or ""
            wrapped = getattr(func, "__wrapped__", None)
            trusted = code in TRUSTED_WRAPPER_CODES or (
                wrapper_module.split(".", 1)[0] == top and is_source_code(code, wrapper_module)
            )
            if wrapped is None or not trusted:
                where = f"{code.co_filename}:{code.co_firstlineno}"
                name = getattr(code, "co_qualname", code.co_name)
                return (
                    f"{qualname} ({module}) runs other code than its installed source ({name} "
                    f"at {where}: replaced at run time, wrapped, or bytecode that is not its "
                    "source)"
                )
            func = wrapped
        else:
            return f"{qualname} ({module}): more than 8 wrappers"
    return None


@contextmanager
def observing(observer: Callable[..., Any], observed: Callable[..., Any]) -> Iterator[None]:
    """While open, `observer` — prenoise's own wrapper around `observed` that calls it and
    changes nothing (a spy recording what it returns) — is looked through like a trusted
    decorator: the live check goes on with `observed`."""
    with _lock:
        _observers[id(observer)] = (observer, observed)
    try:
        yield
    finally:
        with _lock:
            _observers.pop(id(observer), None)


def _observed(layer: object) -> object | None:
    """What `layer` calls when it is an open `observing` observer; else None."""
    seen = _observers.get(id(layer))
    return seen[1] if seen is not None and seen[0] is layer else None


def live_code_problem(module: str, qualname: str, unwrap: Unwrap | None = None) -> str | None:
    """Why what runs at `module:qualname` is not the installed source's code (None: it is, or
    the module is not loaded). A class is checked through every function its body defines;
    `unwrap` looks through the caller's own hook wrappers (see the module doc)."""
    try:
        obj = live_object(module, qualname)
        if obj is None:
            return None
        methods = _methods(module, qualname)
    except LookupError as error:
        return str(error)
    except (CodeUnavailable, SyntaxError, ValueError, OSError) as error:
        return f"{qualname} ({module}): {error}"
    if methods is None:
        return _function_problem(obj, module, qualname, unwrap)
    if not isinstance(obj, type):
        return f"{qualname} ({module}) is a {type(obj).__name__} at run time, not a class"
    for name in methods:
        method = vars(obj).get(name)
        if method is None:
            return f"{qualname}.{name} ({module}) is not defined at run time"
        problem = _function_problem(method, module, f"{qualname}.{name}", unwrap)
        if problem is not None:
            return problem
    return None


def _methods(module: str, qualname: str) -> tuple[str, ...] | None:
    """The functions the source's class `qualname` defines (None: `qualname` is a function)."""
    key = (module, qualname)
    with _lock:
        if key in _members:
            return _members[key]
    if sys.version_info >= (3, 11):  # from the compiled module (`co_qualname`): no second parse
        methods = _code_methods(module, qualname)
    else:  # pragma: no cover - Python 3.10
        path = installed_source_file(module)
        if path is None:
            raise CodeUnavailable(f"module {module} is not installed")
        with tokenize.open(path) as file:
            node = definition(ast.parse(file.read(), str(path)), qualname)
        methods = None
        if isinstance(node, ast.ClassDef):
            body = node.body
            names = [i.name for i in body if isinstance(i, ast.FunctionDef | ast.AsyncFunctionDef)]
            methods = tuple(dict.fromkeys(names))
    with _lock:
        _members[key] = methods
    return methods


_NEW_LOCALS = 0x2  # `inspect.CO_NEWLOCALS`: a function's code (a class body's has it not)


def _code_methods(module: str, qualname: str) -> tuple[str, ...] | None:
    """`_methods` read from `module`'s compiled source (`_module_code`, cached)."""
    found = next(
        (c for c in _nested(_module_code(module)) if getattr(c, "co_qualname", "") == qualname),
        None,
    )
    if found is None:
        raise CodeUnavailable(f"{qualname} is not defined there")
    if found.co_flags & _NEW_LOCALS:
        return None
    names = [
        c.co_name
        for c in found.co_consts
        if isinstance(c, types.CodeType)
        and c.co_flags & _NEW_LOCALS
        and not c.co_name.startswith("<")
        and getattr(c, "co_qualname", "") == f"{qualname}.{c.co_name}"
    ]
    return tuple(dict.fromkeys(names))


def _forget() -> None:
    """Forget every compiled module and verdict (tests that change installed files)."""
    with _lock:
        _compiled.clear()
        _same.clear()
        _members.clear()


def torch_draws_problem() -> str | None:
    """Why torch's own draw functions are not torch's at run time (None: they are):
    `torch.randn` must be the `torch._C._VariableFunctions.randn` builtin and
    `torch.Tensor.normal_` the `torch._C.TensorBase` method (a patch of either changes what
    every serial draw gives, and no prepared draw could know it)."""
    import torch

    if torch.randn is not torch._C._VariableFunctions.randn:
        return "torch.randn is replaced at run time"
    if torch.Tensor.normal_ is not torch._C.TensorBase.normal_:
        return "torch.Tensor.normal_ is replaced at run time"
    return None


def live_keys_problem(
    keys: Iterator[str] | tuple[str, ...] | list[str], unwrap: Unwrap | None = None
) -> str | None:
    """The first `live_code_problem` among `module:qualname` keys, after torch's own draws
    (`torch_draws_problem`); None when all run their installed source. `unwrap`: the caller's
    own hook wrappers, looked through (see the module doc)."""
    problem = torch_draws_problem()
    if problem is not None:
        return problem
    for key in keys:
        module, _, qualname = key.partition(":")
        problem = live_code_problem(module, qualname, unwrap)
        if problem is not None:
            return problem
    return None


def reviewed_code_problem(
    keys: tuple[str, ...], unwrap: Unwrap | None, digest: Callable[[str], str]
) -> str | None:
    """An integration path's live check: `live_keys_problem` over the path's `keys`, leaving
    out a function its installed source does not define (`digest(key)` is `ABSENT`: reviewed as
    absent, nothing of it can run), said as "the code that runs is not the reviewed code: ..."."""

    def defined(key: str) -> bool:
        try:
            return digest(key) != ABSENT
        except CodeUnavailable:  # unreadable: the digest check turned the path off already
            return True

    found = live_keys_problem(tuple(filter(defined, keys)), unwrap)
    return None if found is None else f"the code that runs is not the reviewed code: {found}"
