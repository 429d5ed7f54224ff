"""Source digests of upstream code: how both integrations decide support by the code itself.

A *digest* is the sha256 (12 hex digits) of a function's `ast.unparse` with its docstring and
return annotation dropped, so formatting, comments and docs do not count and any code change
does. A class is digested whole: the same for the class and every function and class in it.
diffusers' and vLLM-Omni's reviewed tables (`integrations.*.reviewed`) record these digests per
release; `scripts/diffusers_digests.py` and `scripts/vllm_omni_digests.py` print them from the
released wheels (`release_wheel`, `wheel_module_source`).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib.util
import subprocess
import sys
import threading
import tokenize
import zipfile
from pathlib import Path

__all__ = [
    "ABSENT",
    "CodeUnavailable",
    "InstalledDigests",
    "code_digest",
    "definition",
    "installed_source_file",
    "node_digest",
    "release_wheel",
    "wheel_module_source",
]


class CodeUnavailable(LookupError):
    """The source of a relied-on function cannot be read (package, module or definition)."""


def installed_source_file(module: str) -> Path | None:
    """`module`'s source file under its top package's folder, found without importing anything
    (the top package's spec is looked up, never executed); None when no such module exists.
    `CodeUnavailable` when the top package is not installed."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as error:
        raise CodeUnavailable(f"{top} cannot be found: {error}") from None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if spec is not None and not locations and not rest and spec.origin:  # a top-level module
        origin = Path(spec.origin)
        return origin if origin.suffix == ".py" and origin.is_file() else None
    if not locations:
        raise CodeUnavailable(f"{top} is not installed")
    for location in locations:
        base = Path(location).joinpath(*rest)
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
    return None


ABSENT = "absent"
"""The digest of a function the installed source does not define (its module lacks it, or the
package has no such module); recorded as reviewed where a release does not define it."""


class InstalledDigests:
    """The digests of installed functions (`module:qualname` -> digest), each module's source
    file found with `installed_source_file` (nothing imported) and parsed once, each digest
    computed once; thread-safe. One instance per integration (`clear` for its tests).

    `digest` answers `ABSENT` where the module does not define the function or the package has
    no such module, and raises `CodeUnavailable` when the package is not installed or a module's
    source cannot be read or parsed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trees: dict[str, ast.Module] = {}
        self.cache: dict[str, str] = {}
        """key -> digest, as computed (a test may set an entry: that digest is then answered)."""

    def digest(self, key: str) -> str:
        """The digest of the installed `module:qualname` (cached)."""
        with self._lock:
            digest = self.cache.get(key)
            if digest is None:
                digest = self.cache[key] = self._compute(key)
            return digest

    def tree(self, module: str) -> ast.Module:
        """`module`'s installed source, parsed (cached); `CodeUnavailable` where the package
        has no such module, or as `digest`."""
        with self._lock:
            tree = self._tree(module)
        if tree is None:
            raise CodeUnavailable(f"module {module} is not installed")
        return tree

    def _tree(self, module: str) -> ast.Module | None:
        tree = self._trees.get(module)
        if tree is None:
            path = installed_source_file(module)
            if path is None:
                return None
            try:
                with tokenize.open(path) as file:
                    tree = ast.parse(file.read(), str(path))
            except (OSError, SyntaxError) as error:
                raise CodeUnavailable(f"the source of {module} cannot be read: {error}") from None
            self._trees[module] = tree
        return tree

    def _compute(self, key: str) -> str:
        module, _, qualname = key.partition(":")
        tree = self._tree(module)
        if tree is None:
            return ABSENT
        try:
            return node_digest(definition(tree, qualname))
        except CodeUnavailable:
            return ABSENT

    def clear(self) -> None:
        """Forget every parsed module and digest (tests that change the installed files)."""
        with self._lock:
            self._trees.clear()
            self.cache.clear()


def definition(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.ClassDef:
    """The function or class `qualname` (dotted through classes) defined at module level of
    `tree`; `CodeUnavailable` when it is not."""
    node: ast.AST = tree
    for part in qualname.split("."):
        found = next(
            (
                n
                for n in getattr(node, "body", ())
                if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name == part
            ),
            None,
        )
        if found is None:
            raise CodeUnavailable(f"{qualname} is not defined there")
        node = found
    assert isinstance(node, ast.FunctionDef | ast.ClassDef)
    return node


def _strip(node: ast.FunctionDef | ast.ClassDef) -> None:
    first = node.body[0] if node.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        node.body = node.body[1:]
    if isinstance(node, ast.FunctionDef):
        node.returns = None


def node_digest(node: ast.FunctionDef | ast.ClassDef) -> str:
    """The digest of a parsed function or class (the tree is not changed)."""
    if isinstance(node, ast.ClassDef):  # a whole class: every docstring and annotation in it
        stripped: ast.FunctionDef | ast.ClassDef = copy.deepcopy(node)
        for inner in ast.walk(stripped):
            if isinstance(inner, ast.FunctionDef | ast.ClassDef):
                _strip(inner)
    else:  # a shallow copy takes the new body and annotation
        stripped = copy.copy(node)
        _strip(stripped)
    return hashlib.sha256(ast.unparse(stripped).encode()).hexdigest()[:12]


def code_digest(source: str, qualname: str) -> str:
    """The digest of the function (or class) `qualname` defined in the module `source`;
    `CodeUnavailable` when it is not defined there."""
    return node_digest(definition(ast.parse(source), qualname))


def release_wheel(project: str, release: str, folder: Path) -> Path:
    """The pure-Python wheel of `project`'s `release` in `folder`, downloaded there with
    `pip download --no-deps` when missing (recording digests; nothing is installed)."""
    path = folder / f"{project.replace('-', '_')}-{release}-py3-none-any.whl"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "--no-deps", f"{project}=={release}", "-d", str(folder)], check=True)
    return path


def wheel_module_source(wheel: Path, module: str) -> str | None:
    """The source of `module` (`a.b.c`: `a/b/c.py` or `a/b/c/__init__.py`) in `wheel`; None
    when the wheel has no such module."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        base = module.replace(".", "/")
        member = next((n for n in (f"{base}.py", f"{base}/__init__.py") if n in names), None)
        return None if member is None else archive.read(member).decode()
