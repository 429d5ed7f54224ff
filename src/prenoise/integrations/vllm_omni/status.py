"""What `prenoise doctor` says about the vLLM-Omni plugin, read without importing vLLM-Omni.

Package metadata, the environment and vLLM-Omni's source files (`support`: the digests of the
functions each path relies on; vLLM-Omni itself is never imported): `prenoise doctor` stays fast
and runs where vLLM-Omni is missing or broken.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping
from dataclasses import dataclass

from prenoise.integrations.vllm_omni import support
from prenoise.integrations.vllm_omni.plugin import installed_version
from prenoise.integrations.vllm_omni.reviewed import (
    H3_AHEAD_PATH,
    H3_STREAMS_PATH,
    PATHS,
    WAN_AHEAD_PATH,
)
from prenoise.integrations.vllm_omni.settings import PluginSettings, SettingsError

__all__ = ["ENTRY_POINT_GROUP", "ENTRY_POINT_NAME", "PluginStatus", "plugin_status"]

ENTRY_POINT_GROUP = "vllm_omni.general_plugins"
ENTRY_POINT_NAME = "prenoise"


@dataclass(frozen=True)
class PluginStatus:
    """The plugin as the next vLLM-Omni process would load it."""

    vllm_omni_version: str | None
    """The installed vllm-omni release, None when it is not installed."""
    entry_point: str | None
    """`module:function` registered under `vllm_omni.general_plugins` as `prenoise`."""
    allow_list: str | None
    """`VLLM_PLUGINS` (an allow-list by entry-point name), None when unset."""
    settings: PluginSettings | None
    """The settings the next process reads; None when a value is invalid (`settings_error`)."""
    settings_error: str | None = None
    """Why the settings are invalid (the plugin then installs nothing); None when valid."""
    code: support.Support | None = None
    """The paths the installed vLLM-Omni code runs (None: vllm-omni is not installed)."""

    @property
    def settings_text(self) -> str:
        """The settings as their variables, or the error that makes the plugin install nothing."""
        if self.settings is None:
            return f"{self.settings_error} (the plugin installs nothing)"
        return self.settings.describe()

    @property
    def supported(self) -> bool:
        """vllm-omni is installed and MiniMax-H3's draws are the reviewed code (its streams and
        its noise prepared ahead can run; other paths may still be off: `code.problems`)."""
        return self.code is not None and self.code.h3_streams

    @property
    def allowed(self) -> bool:
        if self.allow_list is None:
            return True
        return ENTRY_POINT_NAME in self.allow_list.split(",")  # vLLM's own parsing

    @property
    def verdict(self) -> str:
        """One line: whether vLLM-Omni processes will install the plugin, and if not why."""
        if self.vllm_omni_version is None:
            return "inactive: vllm-omni is not installed here"
        if self.entry_point is None:
            return "inactive: the entry point is not registered (reinstall prenoise)"
        if not self.allowed:
            return f"inactive: VLLM_PLUGINS={self.allow_list!r} does not name 'prenoise'"
        if self.settings is None:
            return f"inactive: {self.settings_text}"
        if not self.settings.enabled:
            return "inactive: disabled by PRENOISE_VLLM_OMNI=0"
        stream = self.settings.noise_stream
        off = [path for path in PATHS if self.code is not None and not self.code.runs(path)]
        if not off:
            return f"active in every vLLM-Omni process (MiniMax-H3, stream {stream})"
        on = [path for path in PATHS if path not in off]
        if not on:
            return (
                "inactive: every path runs upstream's code untouched here (the code changed: "
                "see the rows below)"
            )
        return (
            f"active in every vLLM-Omni process for {', '.join(on)} only (stream {stream}); "
            f"off here: {', '.join(off)} (see the rows below)"
        )

    def rows(self) -> list[tuple[str, str]]:
        """`prenoise doctor`'s rows: the verdict, then per path (MiniMax-H3 noise prepared ahead,
        its noise streams, Wan2.2 T2V prepared ahead, what `vllm-omni-verify` proves) whether it
        runs here, each one that does not naming the changed function and what to do."""
        version = self.vllm_omni_version or "not installed"
        return [
            ("vLLM-Omni plugin", self.verdict),
            ("vllm-omni", version if self.code is None else f"{version} ({self._code_text()})"),
            *self._path_rows(),
            (f"entry point {ENTRY_POINT_GROUP}", self.entry_point or "not registered"),
            ("VLLM_PLUGINS", self.allow_list if self.allow_list is not None else "(unset)"),
            ("plugin settings", self.settings_text),
        ]

    def _path_rows(self) -> list[tuple[str, str]]:
        """One row per path, and one for `vllm-omni-verify` (nothing without vllm-omni)."""
        if self.code is None:
            return []
        code = self.code
        rows = []
        for path in (H3_AHEAD_PATH, H3_STREAMS_PATH, WAN_AHEAD_PATH):
            if code.runs(path):
                rows.append((path, "on (the reviewed code)"))
            else:
                rows.append((path, f"off: {_off_text(code.problems[path])}"))
        if code.h3_ahead:
            verify = "proves MiniMax-H3's noise prepared ahead by prenoise (plugin off vs on)"
        else:
            verify = (
                "exits 1 here: MiniMax-H3 noise prepared ahead is off, so prenoise prepares "
                "nothing for it to prove"
            )
        rows.append(("vllm-omni-verify", verify))
        return rows

    def _code_text(self) -> str:
        """The code the installed vllm-omni has, and each path it turns off (by function)."""
        assert self.code is not None
        code = self.code
        text = f"code of {code.release}" if code.release else "no reviewed release's code"
        for path, problem in sorted(code.problems.items()):
            text += f"; {path} off: {problem.split(' (', 1)[0]} is not the reviewed code"
        return text


def _off_text(problem: str) -> str:
    """A path that is off: upstream's code runs, the changed function, the next step."""
    return f"upstream's code runs untouched; {problem}; {support.NEXT_STEP}"


def plugin_status(environ: Mapping[str, str] | None = None) -> PluginStatus:
    """Read the plugin's status from package metadata and `environ` (default: os.environ)."""
    env = os.environ if environ is None else environ
    settings: PluginSettings | None = None
    error: str | None = None
    try:
        settings = PluginSettings.from_env(env)
    except SettingsError as invalid:
        error = str(invalid)
    version = installed_version("vllm-omni")
    return PluginStatus(
        vllm_omni_version=version,
        entry_point=_entry_point(),
        allow_list=env.get("VLLM_PLUGINS"),
        settings=settings,
        settings_error=error,
        code=support.current() if version is not None else None,
    )


def _entry_point() -> str | None:
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == ENTRY_POINT_NAME:
            return entry.value
    return None
