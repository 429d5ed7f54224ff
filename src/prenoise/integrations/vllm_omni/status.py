"""What `prenoise doctor` says about the vLLM-Omni plugin, read without importing vLLM-Omni.

Package metadata and the environment only (vLLM-Omni itself is never imported): `prenoise doctor`
stays fast and runs where vLLM-Omni is missing or broken.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping
from dataclasses import dataclass

from prenoise.integrations.vllm_omni.plugin import SUPPORTED_VERSIONS, installed_version
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

    @property
    def settings_text(self) -> str:
        """The settings as their variables, or the error that makes the plugin install nothing."""
        if self.settings is None:
            return f"{self.settings_error} (the plugin installs nothing)"
        return self.settings.describe()

    @property
    def supported(self) -> bool:
        return self.vllm_omni_version is not None and self.vllm_omni_version.startswith(
            SUPPORTED_VERSIONS
        )

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
        if not self.supported:
            supported = ", ".join(v + "x" for v in SUPPORTED_VERSIONS)
            return f"inactive: vllm-omni {self.vllm_omni_version} is not supported ({supported})"
        if self.entry_point is None:
            return "inactive: the entry point is not registered (reinstall prenoise)"
        if not self.allowed:
            return f"inactive: VLLM_PLUGINS={self.allow_list!r} does not name 'prenoise'"
        if self.settings is None:
            return f"inactive: {self.settings_text}"
        if not self.settings.enabled:
            return "inactive: disabled by PRENOISE_VLLM_OMNI=0"
        stream = self.settings.noise_stream
        return f"active in every vLLM-Omni process (MiniMax-H3, stream {stream})"

    def rows(self) -> list[tuple[str, str]]:
        """`prenoise doctor`'s rows."""
        version = self.vllm_omni_version or "not installed"
        support = "supported" if self.supported else "not supported"
        return [
            ("vLLM-Omni plugin", self.verdict),
            ("vllm-omni", version if self.vllm_omni_version is None else f"{version} ({support})"),
            (f"entry point {ENTRY_POINT_GROUP}", self.entry_point or "not registered"),
            ("VLLM_PLUGINS", self.allow_list if self.allow_list is not None else "(unset)"),
            ("plugin settings", self.settings_text),
        ]


def plugin_status(environ: Mapping[str, str] | None = None) -> PluginStatus:
    """Read the plugin's status from package metadata and `environ` (default: os.environ)."""
    env = os.environ if environ is None else environ
    settings: PluginSettings | None = None
    error: str | None = None
    try:
        settings = PluginSettings.from_env(env)
    except SettingsError as invalid:
        error = str(invalid)
    return PluginStatus(
        vllm_omni_version=installed_version("vllm-omni"),
        entry_point=_entry_point(),
        allow_list=env.get("VLLM_PLUGINS"),
        settings=settings,
        settings_error=error,
    )


def _entry_point() -> str | None:
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == ENTRY_POINT_NAME:
            return entry.value
    return None
