"""Which of the plugin's paths run on the installed SGLang, decided by its code.

`current()` answers once per process (`reset()` forgets it, for tests): the installed digest of
every key of `reviewed.REVIEWED` is computed from the source files under the `sglang` package
folder, found with `importlib.util.find_spec("sglang")` — nothing of SGLang is imported or
executed. A path of `reviewed.PATHS` runs only where each function it relies on has a reviewed
digest; otherwise `Support.problems` names the first function that is not the reviewed code and
that path runs upstream's code untouched (the hooks pass every call straight through).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from prenoise.guards.source_digests import ABSENT, CodeUnavailable, InstalledDigests
from prenoise.integrations.sglang.reviewed import (
    H3_CONDITIONS_PATH,
    H3_INITIAL_PATH,
    H3_ROLLOUT_PATH,
    H3_STREAMS_PATH,
    PATHS,
    RELEASES,
    REVIEWED,
)

__all__ = [
    "ABSENT",
    "ENABLE_ENV",
    "H3_CONDITIONS_PATH",
    "H3_INITIAL_PATH",
    "H3_ROLLOUT_PATH",
    "H3_STREAMS_PATH",
    "Support",
    "current",
    "enabled",
    "installed_digest",
    "key_problem",
    "reset",
]

ENABLE_ENV = "PRENOISE_SGLANG"
"""`0` turns the plugin off; `1` or unset: on."""


def enabled(environ: Any = None) -> bool | None:
    """`PRENOISE_SGLANG`: True (`1` or unset), False (`0`), None (another value)."""
    raw = (os.environ if environ is None else environ).get(ENABLE_ENV, "1").strip()
    return {"1": True, "0": False, "": True}.get(raw)


_lock = threading.Lock()
_installed = InstalledDigests()
_digests = _installed.cache  # key -> installed digest (the shared cache's own dict)
_current: Support | None = None


@dataclass(frozen=True)
class Support:
    """The plugin's paths on the installed SGLang."""

    problems: dict[str, str] = field(default_factory=dict)
    """path -> why it runs upstream's code (the first function that is not the reviewed code)."""
    release: str | None = None
    """The reviewed release whose code is installed for every key (log lines only)."""

    def runs(self, path: str) -> bool:
        return path not in self.problems

    @property
    def h3_initial(self) -> bool:
        return self.runs(H3_INITIAL_PATH)


def installed_digest(key: str) -> str:
    """The digest of the installed `module:qualname` (`ABSENT` where it is not defined);
    `CodeUnavailable` when sglang is not installed or the source cannot be read
    (`source_digests.InstalledDigests`, cached per process)."""
    return _installed.digest(key)


def key_problem(key: str) -> str | None:
    """None when the installed `key` has a reviewed digest; else why, naming the function."""
    module, _, qualname = key.partition(":")
    try:
        digest = installed_digest(key)
    except CodeUnavailable as error:
        return f"{qualname} ({module}) cannot be read: {error}"
    reviewed = REVIEWED.get(key, {})
    if digest in reviewed:
        return None
    seen = ", ".join(f"{d} ({'/'.join(r)})" for d, r in reviewed.items())
    what = "is missing" if digest == ABSENT else f"changed: digest {digest}"
    return f"{qualname} ({module}) {what}; reviewed {seen}"


def _installed_release(keys: set[str]) -> str | None:
    """The reviewed release whose code every key of `keys` (those of the paths that run) is."""
    candidates = set(RELEASES)
    for key in sorted(keys):
        try:
            candidates &= set(REVIEWED[key].get(installed_digest(key), ()))
        except CodeUnavailable:
            return None
    return next((r for r in RELEASES if r in candidates), None)


def current() -> Support:
    """The installed code's support, computed once per process."""
    global _current
    if _current is None:
        problems = {
            path: problem
            for path, keys in PATHS.items()
            if (problem := next((p for p in map(key_problem, keys) if p), None))
        }
        running = {key for path, keys in PATHS.items() if path not in problems for key in keys}
        found = Support(problems, _installed_release(running))
        with _lock:
            _current = _current or found
    return _current


def reset() -> None:
    """Forget the computed support and digests (tests that change the recorded digests)."""
    global _current
    with _lock:
        _current = None
    _installed.clear()
