"""What `prenoise doctor` says about the diffusers integration on this install, and why.

For every planned pipeline class, per-step scheduler (`STEP_DRAWS`), raw-draw window and modular
plan: whether the installed diffusers code it relies on is the reviewed code (`digests.py`, read
from the source files, no pipeline imported), i.e. the verdict `enable()` reaches. Where
diffusers is not installed, it says so and how to install it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["DiffusersStatus", "diffusers_status"]


@dataclass(frozen=True)
class DiffusersStatus:
    """The integration on this install. Each mapping is class name -> None (used) or the
    changed code that makes it run plain."""

    version: str | None
    """diffusers' `__version__`; None when diffusers is not installed."""
    classes: Mapping[str, str | None] = field(default_factory=dict)
    schedulers: Mapping[str, str | None] = field(default_factory=dict)
    windows: Mapping[str, str | None] = field(default_factory=dict)
    modular: Mapping[str, str | None] = field(default_factory=dict)
    modular_unreviewed: tuple[str, ...] = ()
    """Modular plans with no reviewed table of their own (gated by the common code only)."""
    broken: str | None = None
    """Why an installed diffusers cannot be imported (then `version` is None)."""

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) rows for `prenoise doctor`."""
        if self.version is None:
            if self.broken is not None:
                return [
                    ("diffusers", f"installed, not importable ({self.broken}): every call plain")
                ]
            return [("diffusers", "not installed (pip install 'prenoise[diffusers]')")]
        from prenoise.integrations.diffusers.digests import RELEASES

        rows = [
            (
                "diffusers",
                f"{self.version} (support decided by source digests, reviewed on "
                f"{RELEASES[0]}-{RELEASES[-1]}, not by the version)",
            ),
            ("diffusers classes planned", _summary(self.classes, "planned")),
            ("diffusers per-step noise ahead", _summary(self.schedulers, "schedulers")),
            ("diffusers stream windows", _summary(self.windows, "armed in named streams")),
        ]
        modular = _summary(self.modular, "planned")
        if self.modular_unreviewed:
            names = ", ".join(self.modular_unreviewed)
            modular += f"; gated by the common code only (no reviewed table): {names}"
        rows.append(("diffusers modular plans", modular))
        return rows


def _summary(verdicts: Mapping[str, str | None], what: str) -> str:
    used = sum(1 for problem in verdicts.values() if problem is None)
    text = f"{used} of {len(verdicts)} {what}"
    plain = [f"{name}: {problem}" for name, problem in verdicts.items() if problem is not None]
    if plain:
        from prenoise.integrations.diffusers.digests import NEXT_STEP

        text += "; plain (code changed): " + "; ".join(plain) + f"; {NEXT_STEP}"
    return text


def _name(path: str) -> str:
    return path.rsplit(".", 1)[1]


def diffusers_status() -> DiffusersStatus:
    """The verdicts for this install (digests computed once per process, as `enable` does)."""
    if importlib.util.find_spec("diffusers") is None:
        return DiffusersStatus(None)
    try:
        import diffusers
    except Exception as error:  # a broken install: doctor reports it rather than failing
        return DiffusersStatus(None, broken=repr(error))

    from prenoise.integrations.diffusers import digests
    from prenoise.integrations.diffusers.modular.registry import supported as supported_modular
    from prenoise.integrations.diffusers.raw_draws import windows
    from prenoise.integrations.diffusers.registry import supported
    from prenoise.integrations.diffusers.step_noise import STEP_DRAWS

    classes = {_name(p): digests.code_problem(digests.relied_on(p)) for p in supported()}
    schedulers = {
        _name(p): digests.code_problem((f"{p.rsplit('.', 1)[0]}:{_name(p)}.step",))
        for p in STEP_DRAWS
    }
    armed = {}
    for path, window in windows().items():
        base = f"{path.rsplit('.', 1)[0]}:{_name(path)}"
        armed[_name(path)] = digests.code_problem((f"{base}.__call__", f"{base}.{window.after}"))
    modular_paths = supported_modular()
    modular = {_name(p): digests.code_problem(digests.modular_relied_on(p)) for p in modular_paths}
    unreviewed = tuple(
        _name(p) for p in modular_paths if set(digests.modular_relied_on(p)) <= _common()
    )
    return DiffusersStatus(
        str(diffusers.__version__), classes, schedulers, armed, modular, unreviewed
    )


def _common() -> set[str]:
    from prenoise.integrations.diffusers.reviewed_modular import MODULAR_COMMON

    return set(MODULAR_COMMON)
