"""Whether the installed diffusers code is the code the plans were reviewed on: source digests.

A plan is only safe where the caller's generator is drawn by nothing but the planned draws while
they are prepared, and that is decided by a handful of diffusers functions per class: its
`__call__`, `prepare_latents`, `retrieve_latents`, the VAE posteriors' `sample`, `randn_tensor`
(`reviewed.py` lists them and `relied_on` says which a class needs). Each was read on every
release of `RELEASES` and its *digest* recorded: sha256 (12 hex digits) of the function's
`ast.unparse` with its docstring and return annotation dropped, so formatting, comments and
docs do not count, any code change does. A class can also be pinned whole (a `class` digest:
every docstring and return annotation in it dropped).

At `enable(pipe)` or the class's first call, once per process and class, prenoise computes the
digests of the installed functions a class relies on (from the module's source file, without
importing anything new) and plans the class only where every one is a reviewed digest, whatever
`diffusers.__version__` says: diffusers' main branch (`0.43.0.dev0`) or a later release whose
draw code is the reviewed code is served as the release it equals. A class with a changed,
missing or unreadable function runs plain; the reason names the function. The same holds for the
per-step schedulers of `step_noise.STEP_DRAWS` (their `step`), the raw-draw windows of
`raw_draws.py` and the modular pipelines' plans (`modular_code_problem`, keyed by the
`ModularPipeline` class).

Digests speak of the installed *files*; what runs is the live function objects. So at every
call `class_live_problem` / `modular_live_problem` also check that each relied-on function, as
found at its place now, carries the code its installed source compiles to (a runtime patch of
`randn_tensor`, a swapped `__code__`, a wrapper put around `__call__`, an unchecked-hash `.pyc`
are each named), and that `torch.randn` / `Tensor.normal_` are torch's own
(`prenoise.guards.live_code`; verified once per function object, then an identity check).

Not covered by a digest: code the listed functions call that does not decide a draw (encoders,
transformers); it is trusted not to draw from the caller's generator, as it does in every
reviewed release (a `__call__` that handed the generator to it would change its digest).
"""

from __future__ import annotations

import ast
import importlib
import sys
import threading
import tokenize
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from prenoise.guards.live_code import live_keys_problem
from prenoise.guards.source_digests import CodeUnavailable, code_digest, definition, node_digest
from prenoise.integrations.diffusers.reviewed import COMMON, RELEASES, REVIEWED, SHARED
from prenoise.integrations.diffusers.reviewed_modular import MODULAR_COMMON, MODULAR_REVIEWED

__all__ = [
    "NEXT_STEP",
    "RELEASES",
    "TESTED_DIFFUSERS_VERSIONS",
    "CodeUnavailable",
    "class_code_problem",
    "class_live_problem",
    "code_digest",
    "code_problem",
    "installed_digest",
    "modular_code_problem",
    "modular_live_problem",
    "modular_relied_on",
    "register_reviewed_code",
    "relied_on",
    "reviewed_digests",
    "step_code_problem",
    "window_code_problem",
]

NEXT_STEP = (
    f"prenoise's plans run on the code of diffusers {', '.join(RELEASES)}: install one of them, "
    "or report the changed function to prenoise"
)
"""What to do about a class, scheduler or window whose relied-on code changed: every line
naming a changed function ends with it."""
TESTED_DIFFUSERS_VERSIONS = frozenset(RELEASES)
"""The diffusers releases every reviewed digest was read on (0.40.0, vLLM-Omni 0.30.0's pin, to
0.42.1). Support is decided by the digests, not by this set: any diffusers whose relied-on code
has reviewed digests is planned (`class_code_problem`)."""

_lock = threading.Lock()
_reviewed: dict[str, dict[str, tuple[str, ...]]] = {k: dict(v) for k, v in REVIEWED.items()}
_explicit: dict[str, tuple[str, ...]] = {path: (*COMMON, *keys) for path, keys in SHARED.items()}
for _modular, _table in MODULAR_REVIEWED.items():
    for _key, _seen in _table.items():
        _reviewed.setdefault(_key, {}).update(_seen)
    _explicit[_modular] = (*MODULAR_COMMON, *_table)
_parse_lock = threading.Lock()  # parsing the cached trees
_trees: dict[str, ast.Module] = {}
_digests: dict[str, str] = {}
_problems: dict[tuple[str, ...], str | None] = {}
_verdicts: dict[tuple[str, str], str | None] = {}  # (kind, class path) -> verdict, once per class


def _reset() -> None:
    """Forget every computed digest and verdict (tests that change diffusers' files)."""
    with _lock:
        _trees.clear()
        _digests.clear()
        _problems.clear()
        _verdicts.clear()


def _forget_verdicts() -> None:
    """Forget the verdicts, keep the digests (tests that change the reviewed tables)."""
    with _lock:
        _problems.clear()
        _verdicts.clear()


def _source_file(module: str) -> Path:
    """The module's source file: its `__file__` when loaded, else found under the top package's
    folder without importing anything (diffusers' subpackages import much on import)."""
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None)
    if path is None:
        top, *rest = module.split(".")
        try:
            package = importlib.import_module(top)
        except ImportError as error:
            raise CodeUnavailable(f"{top} is not importable: {error}") from None
        base = Path(getattr(package, "__file__", None) or ".").parent.joinpath(*rest)
        path = next(
            (p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None
        )
        if path is None:
            raise CodeUnavailable(f"module {module} is not installed")
    if not str(path).endswith(".py"):
        raise CodeUnavailable(f"module {module} has no Python source ({path})")
    return Path(path)


def _tree(module: str) -> ast.Module:
    tree = _trees.get(module)
    if tree is None:
        path = _source_file(module)
        try:
            with tokenize.open(path) as file:
                source = file.read()
        except OSError as error:
            raise CodeUnavailable(f"the source of {module} cannot be read: {error}") from None
        tree = ast.parse(source, path)
        _trees[module] = tree
    return tree


def installed_digest(key: str) -> str:
    """The digest of the installed `module:qualname` (cached per process)."""
    digest = _digests.get(key)
    if digest is None:
        module, _, qualname = key.partition(":")
        with _parse_lock:
            try:
                node = definition(_tree(module), qualname)
            except CodeUnavailable as error:
                raise CodeUnavailable(f"{qualname} ({module}): {error}") from None
            digest = node_digest(node)
        _digests[key] = digest
    return digest


def reviewed_digests(key: str) -> dict[str, tuple[str, ...]]:
    """digest -> the releases it was reviewed on, for `module:qualname` (a copy; {} if none)."""
    with _lock:
        return dict(_reviewed.get(key, {}))


def _class_name(path: str) -> tuple[str, str]:
    module, _, name = path.rpartition(".")
    return module, name


def relied_on(class_path: str) -> tuple[str, ...]:
    """The functions (`module:qualname`) a plan of the class at `module.QualName` relies on.

    A class with an explicit list (`reviewed.SHARED`, a modular plan, `register_reviewed_code`)
    relies on it; every classic class also relies on its own reviewed methods and the reviewed
    module-level functions of its module. With nothing reviewed for it (a plan a user registered
    with `register_plan` alone) that is `reviewed.COMMON` only: the registering code vouches for
    the rest."""
    module, name = _class_name(class_path)
    with _lock:
        explicit = _explicit.get(class_path)
        own = [
            key
            for key in _reviewed
            if key.startswith(f"{module}:")
            and (key.partition(":")[2].startswith(f"{name}.") or "." not in key.partition(":")[2])
        ]
    keys: tuple[str, ...] = explicit if explicit is not None else COMMON
    return tuple(dict.fromkeys((*keys, *own)))


def register_reviewed_code(
    class_path: str, reviewed: Mapping[str, Mapping[str, Iterable[str]]]
) -> None:
    """Record that the plan of `class_path` (a classic or modular pipeline class) relies on the
    functions of `reviewed` (`{"module:qualname": {digest: releases}}`), with those digests
    reviewed: its calls are planned only while every one matches. Adds to what is recorded."""
    with _lock:
        for key, digests in reviewed.items():
            table = _reviewed.setdefault(key, {})
            for digest, releases in digests.items():
                table[digest] = tuple(dict.fromkeys((*table.get(digest, ()), *releases)))
        before = _explicit.get(class_path, COMMON)
        _explicit[class_path] = tuple(dict.fromkeys((*before, *reviewed)))
        _problems.clear()
        _verdicts.clear()


def _describe(key: str, problem: str) -> str:
    module, _, qualname = key.partition(":")
    return f"{qualname} ({module}) {problem}"


def code_problem(keys: Iterable[str]) -> str | None:
    """None when every installed `module:qualname` of `keys` has a reviewed digest; else which
    differ, one clause each ("WanPipeline.prepare_latents (diffusers...) changed: digest ...").
    Cached per process and key set."""
    keys = tuple(keys)
    with _lock:
        if keys in _problems:
            return _problems[keys]
    problems = []
    for key in keys:
        reviewed = reviewed_digests(key)
        if not reviewed:
            problems.append(_describe(key, "has no reviewed digest"))
            continue
        try:
            digest = installed_digest(key)
        except CodeUnavailable as error:
            problems.append(f"{error}")
            continue
        if digest not in reviewed:
            seen = ", ".join(f"{d} ({'/'.join(r)})" for d, r in reviewed.items())
            problems.append(_describe(key, f"changed: digest {digest}, reviewed {seen}"))
    verdict = "; ".join(problems) if problems else None
    with _lock:
        _problems[keys] = verdict
    return verdict


def _changed(problem: str | None) -> str | None:
    return None if problem is None else f"diffusers code differs from the reviewed code: {problem}"


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def class_code_problem(cls: type) -> str | None:
    """Why the plan of pipeline class `cls` may not be used on this diffusers (None: it may):
    a function it relies on (`relied_on`) is not the reviewed code."""
    return _once("class", _path(cls), relied_on)


def _once(kind: str, path: str, keys_of: Callable[[str], tuple[str, ...]]) -> str | None:
    """The verdict on the class at `path`, computed once per process (a cached dict lookup on
    every later call)."""
    try:
        return _verdicts[(kind, path)]
    except KeyError:
        pass
    verdict = _changed(code_problem(keys_of(path)))
    with _lock:
        _verdicts[(kind, path)] = verdict
    return verdict


def modular_code_problem(cls: type) -> str | None:
    """`class_code_problem` for a `ModularPipeline` class: the functions its modular plan relies
    on (`reviewed.MODULAR_REVIEWED`, or `register_reviewed_code`), keyed by the class."""
    return _once("modular", _path(cls), modular_relied_on)


def modular_relied_on(class_path: str) -> tuple[str, ...]:
    """The functions the modular plan of the `ModularPipeline` class at `class_path` relies on:
    its table (`reviewed_modular.MODULAR_REVIEWED`, `register_reviewed_code`) with
    `MODULAR_COMMON`, or `MODULAR_COMMON` alone when none is recorded."""
    with _lock:
        return _explicit.get(class_path, MODULAR_COMMON)


def step_code_problem(scheduler: type) -> str | None:
    """Why a scheduler of `STEP_DRAWS` may not have its per-step draws prepared (None: it may):
    its `step` is not the reviewed code."""
    return _changed(code_problem((f"{scheduler.__module__}:{scheduler.__qualname__}.step",)))


def window_code_problem(cls: type, after: str) -> str | None:
    """Why the raw-draw window of pipeline class `cls` (opened after its method `after`) may
    not be armed: its `__call__` (which makes the draw) or `after` is not the reviewed code."""
    base = f"{cls.__module__}:{cls.__qualname__}"
    return _changed(code_problem((f"{base}.__call__", f"{base}.{after}")))


def _live(keys: Iterable[str]) -> str | None:
    problem = live_keys_problem(tuple(keys))
    return None if problem is None else f"the code that runs is not the reviewed code: {problem}"


def class_live_problem(cls: type) -> str | None:
    """Why what runs for pipeline class `cls` now is not the reviewed code `class_code_problem`
    checked (None: it is); see the module doc. Checked at every call."""
    return _live(relied_on(_path(cls)))


BLOCK_STATE = "diffusers.modular_pipelines.modular_pipeline:ModularPipelineBlocks.get_block_state"
"""Held by prenoise's block hook while overlapped modular calls run: the hook checks the
diffusers method it calls itself (`modular.hook.diffusers_method_problem`)."""


def modular_live_problem(cls: type) -> str | None:
    """`class_live_problem` for a `ModularPipeline` class (its modular plan's functions; the
    block-state read is the hook's to check)."""
    return _live(k for k in modular_relied_on(_path(cls)) if k != BLOCK_STATE)
