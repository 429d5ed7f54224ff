"""Optional parts of prenoise: which pip extra installs which modules, and a check before use.

The base install (torch, numpy, pydantic, pyyaml, rich) runs the core, the CLI's `--help`,
`doctor`, `demo` and `compare`. Everything else is imported only where it is used, and a command
that needs an extra checks for it first (:func:`require`), so a missing one is a one-line error
naming the `pip install` that fixes it, not a traceback from deep inside an import.

That command must work as written: prenoise is not on a package index, so `pip install
'prenoise[ref2va]'` would fail. :func:`install_command` names the source this installation came
from (pip records it, PEP 610 `direct_url.json`): the clone it was installed from (editable or
not), the wheel file, or the index once a release is published; and the interpreter, so the
extra lands in this environment.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
from urllib.parse import unquote, urlparse

__all__ = [
    "EXTRAS",
    "MissingExtraError",
    "extra_for_module",
    "install_command",
    "install_command_from",
    "missing_modules",
    "require",
]

EXTRAS: dict[str, tuple[str, ...]] = {
    "ref2va": ("av", "PIL", "transformers", "safetensors"),
    "serve": ("fastapi", "uvicorn", "prometheus_client"),
    "bench": ("matplotlib",),
    "diffusers": ("diffusers",),
}
"""Top-level modules each extra of pyproject.toml provides and prenoise imports (keep in step).

The `vllm-omni` extra provides nothing: the plugin runs inside an existing vLLM-Omni environment
and installs none of it (see pyproject.toml)."""


class MissingExtraError(ImportError):
    """A command or feature needs a pip extra that is not installed (one line, exit status 2)."""

    def __init__(self, extra: str, missing: list[str], what: str) -> None:
        super().__init__(
            f"{what} needs the '{extra}' extra ({', '.join(missing)} not installed): "
            f"{install_command(extra)}"
        )
        self.extra = extra
        self.missing = missing


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked package counts as missing
        return False


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` (a key of :data:`EXTRAS`) that cannot be imported here."""
    return [m for m in EXTRAS[extra] if not _importable(m)]


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingExtraError` (mentioning `what`, e.g. "prenoise generate") unless every
    module of `extra` is importable. Nothing is imported."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(extra, missing, what)


def extra_for_module(name: str | None) -> str | None:
    """The extra that installs module `name` (or its top-level package); None if none does."""
    if not name:
        return None
    top = name.split(".", 1)[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def install_command(extra: str) -> str:
    """The pip command that adds `extra` to this installation of prenoise, from where it came
    (:func:`install_command_from` on what pip recorded, with this interpreter)."""
    return install_command_from(extra, _installed_direct_url(), sys.executable)


def install_command_from(extra: str, direct_url: str | None, python: str) -> str:
    """`PYTHON -m pip install [-e] SOURCE[EXTRA]` for a prenoise pip installed from
    `direct_url` (the text of its `direct_url.json`; None: from an index).

    A clone's directory (`-e` if it was an editable install) or a wheel file is named when it
    still exists; otherwise the index form, `prenoise[EXTRA]`, which works once a release is
    published.
    """
    target, editable = f"prenoise[{extra}]", False
    try:
        record = json.loads(direct_url) if direct_url else {}
        url = urlparse(record["url"]) if record else None
    except (ValueError, KeyError, TypeError, AttributeError):
        record, url = {}, None
    if url is not None and url.scheme == "file":
        path = unquote(url.path)
        if ("dir_info" in record or "archive_info" in record) and os.path.exists(path):
            target = f"{path}[{extra}]"
            editable = bool(record.get("dir_info", {}).get("editable"))
    flag = "-e " if editable else ""
    return f"{shlex.quote(python)} -m pip install {flag}{shlex.quote(target)}"


def _installed_direct_url() -> str | None:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        return distribution("prenoise").read_text("direct_url.json")
    except PackageNotFoundError:
        return None
