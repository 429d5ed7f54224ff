"""Whether the installed vLLM-Omni code is the code the plugin was reviewed on: source digests.

What the plugin does inside vLLM-Omni is decided by a few upstream functions: those it wraps and
those whose behaviour it relies on (`reviewed.PATHS` lists them per *path*: MiniMax-H3's named
noise streams, MiniMax-H3's noise prepared ahead, Wan2.2 T2V's latents prepared ahead). Each was
read on every release of `reviewed.RELEASES` and its *digest* recorded: sha256 (12 hex digits) of
the function's `ast.unparse` with its docstring and return annotation dropped, so formatting,
comments and docs do not count, any code change does (`prenoise.guards.source_digests`, the
diffusers integration's digest too; a class is digested whole). `ABSENT` records that a release
does not define the function at all (its module lacks it, or the release has no such module).

Once per process (at `register()`, or the first question) the installed digests are computed from
the modules' source files, found under the `vllm_omni` package folder without importing
anything. A path is used only where every function it relies on has a reviewed digest, whatever
`vllm_omni.__version__` says: a later release whose relevant code is the reviewed code is served
as the release it equals; a path with a changed, new or missing function runs upstream's code
untouched and the reason, naming the function, is logged once (`plugin.register`).
"""

from __future__ import annotations

import ast
import hashlib
import threading
from collections.abc import Iterable

from prenoise.guards.source_digests import (
    CodeUnavailable,
    InstalledDigests,
    code_digest,
    node_digest,
)
from prenoise.integrations.vllm_omni.reviewed import (
    ABSENT,
    DRAW_SITES,
    PATHS,
    RELEASES,
    REVIEWED,
    SEEN_NOT_REVIEWED,
)

__all__ = [
    "ABSENT",
    "RELEASES",
    "CodeUnavailable",
    "code_digest",
    "draw_sites",
    "draw_sites_problem",
    "installed_digest",
    "path_problem",
    "reset",
]

_lock = threading.Lock()
_installed = InstalledDigests()
_digests = _installed.cache  # key -> installed digest (the shared cache's own dict)
_problems: dict[str, str | None] = {}


def reset() -> None:
    """Forget every computed digest and verdict (tests that swap vLLM-Omni's files)."""
    _installed.clear()
    with _lock:
        _problems.clear()
        _draw_sites.clear()


def installed_digest(key: str) -> str:
    """The digest of the installed `module:qualname`; `ABSENT` where its module does not define
    it or the installed package has no such module. `CodeUnavailable` when the package is not
    installed or the module's source cannot be read (`source_digests.InstalledDigests`, cached
    per process)."""
    return _installed.digest(key)


def _describe(key: str, problem: str) -> str:
    module, _, qualname = key.partition(":")
    return f"{qualname} ({module}) {problem}"


def key_problem(key: str) -> str | None:
    """None when the installed `key` has a reviewed digest (or is reviewed as absent); else why."""
    reviewed = REVIEWED.get(key, {})
    try:
        digest = installed_digest(key)
    except CodeUnavailable as error:
        return _describe(key, f"cannot be read: {error}")
    if digest in reviewed:
        return None
    seen = ", ".join(f"{d} ({'/'.join(r)})" for d, r in reviewed.items())
    what = "is missing" if digest == ABSENT else f"changed: digest {digest}"
    return _describe(key, f"{what}; reviewed {seen}")


def path_problem(path: str, keys: Iterable[str] | None = None) -> str | None:
    """Why `path` (a key of `reviewed.PATHS`) may not run here, naming the first function whose
    installed code is not a reviewed one; None when every one is. Cached per process."""
    with _lock:
        if keys is None and path in _problems:
            return _problems[path]
    problem = next(
        (p for p in (key_problem(k) for k in (PATHS[path] if keys is None else keys)) if p),
        None,
    )
    if keys is None:
        with _lock:
            _problems[path] = problem
    return problem


_DRAW_ATTRIBUTES = frozenset(
    {
        "randn",
        "randn_like",
        "rand",
        "rand_like",
        "randint",
        "multinomial",
        "normal_",
        "randn_tensor",
    }
)
_draw_sites: dict[str, tuple[tuple[str, str], ...]] = {}


def _draws(function: ast.AST) -> bool:
    """Whether `function` calls a random draw (`randn_tensor(...)`, `torch.randn(...)`,
    `x.normal_(...)`, ...) other than inside `nn.Parameter(...)` (weights made before loading)."""
    in_parameter = {
        id(inner)
        for call in ast.walk(function)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "Parameter"
        for inner in ast.walk(call)
    }
    for call in ast.walk(function):
        if not isinstance(call, ast.Call) or id(call) in in_parameter:
            continue
        name = call.func.attr if isinstance(call.func, ast.Attribute) else None
        if isinstance(call.func, ast.Name):
            name = call.func.id
        if name in _DRAW_ATTRIBUTES:
            return True
    return False


def draw_sites(module: str) -> tuple[tuple[str, str], ...]:
    """`(qualname, digest)` of every function of `module` that makes a random draw, sorted."""
    with _lock:
        found = _draw_sites.get(module)
        if found is None:
            sites: list[tuple[str, str]] = []

            def visit(node: ast.AST, prefix: str) -> None:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.ClassDef):
                        visit(child, f"{prefix}{child.name}.")
                    elif isinstance(child, ast.FunctionDef) and _draws(child):
                        digest = node_digest(child)
                        sites.append((f"{prefix}{child.name}", digest))

            visit(_installed.tree(module), "")
            found = _draw_sites[module] = tuple(sorted(sites))
    return found


def draw_sites_digest(module: str) -> str:
    """One digest of `module`'s draw sites (`draw_sites`): any drawing function added, removed
    or changed changes it."""
    text = "\n".join(f"{name}:{digest}" for name, digest in draw_sites(module))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def draw_sites_problem(module: str) -> str | None:
    """Why `module`'s draws are not the reviewed ones (`reviewed.DRAW_SITES`), naming its drawing
    functions; None when they are, or when `module` is not in the table."""
    reviewed = DRAW_SITES.get(module)
    if reviewed is None:
        return None
    try:
        digest = draw_sites_digest(module)
    except CodeUnavailable as error:
        return f"the draw sites of {module} cannot be read: {error}"
    if digest in reviewed:
        return None
    names = ", ".join(name for name, _ in draw_sites(module)) or "none"
    return (
        f"the functions that draw in {module} ({names}) are not the reviewed code (draw-site "
        f"digest {digest}; reviewed {', '.join(reviewed)})"
    )


def installed_release() -> str | None:
    """The reviewed release whose code is installed for every recorded key (reviewed or seen,
    `reviewed.SEEN_NOT_REVIEWED`), or None (a mix, or code no release had): for log lines,
    never for decisions."""
    candidates = set(RELEASES)
    for key in {*REVIEWED, *SEEN_NOT_REVIEWED}:
        try:
            digest = installed_digest(key)
        except CodeUnavailable:
            return None
        known = {**REVIEWED.get(key, {}), **SEEN_NOT_REVIEWED.get(key, {})}
        candidates &= set(known.get(digest, ()))
        if not candidates:
            return None
    return next(r for r in RELEASES if r in candidates)
