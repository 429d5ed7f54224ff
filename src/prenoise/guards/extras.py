"""Optional parts of prenoise: which pip extra installs which modules, and a check before use.

The base install (`pip install prenoise`: torch, numpy, pydantic, pyyaml, rich) runs the core, the
CLI's `--help`, `doctor`, `demo` and `compare`. Everything else is imported only where it is used,
and a command that needs an extra checks for it first (:func:`require`), so a missing one is a
one-line error naming the `pip install` that fixes it, not a traceback from deep inside an import.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtraError", "extra_for_module", "missing_modules", "require"]

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
            f"pip install 'prenoise[{extra}]'"
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
