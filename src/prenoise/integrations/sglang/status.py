"""What `prenoise doctor` says about the SGLang plugin, read without importing SGLang.

Package metadata, the environment and SGLang's source files (`support`: the digest of every
function each path relies on, computed from the installed files; SGLang itself is never
imported), so `prenoise doctor` stays fast and runs where SGLang is missing or broken. The
verdict never says "active" unless at least one path runs the reviewed code here, and each path
that does not names the changed function and what to do.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping
from dataclasses import dataclass

from prenoise.integrations.sglang import support
from prenoise.integrations.sglang.plugin import ENABLE_ENV
from prenoise.integrations.sglang.reviewed import (
    H3_RECORD_PATH,
    H3_STREAMS_PATH,
    LTX2_STREAMS_PATH,
    LTX2_TWO_STAGE_STREAMS_PATH,
    PATHS,
    RELEASES,
    STANDARD_STREAMS_PATH,
)
from prenoise.integrations.sglang.streams import NOISE_STREAM_ENV, setting
from prenoise.noise.streams import NoiseStreamError

__all__ = ["ENTRY_POINT_GROUP", "ENTRY_POINT_NAME", "NEXT_STEP", "SglangStatus", "sglang_status"]

ENTRY_POINT_GROUP = "sglang.multimodal_gen.plugins"
ENTRY_POINT_NAME = "prenoise"
ALLOW_LIST_ENV = "SGLANG_PLUGINS"

NEXT_STEP = (
    f"prenoise supports the code of sglang {', '.join(RELEASES)}: install it, or report the "
    "changed function to prenoise"
)
"""What a user whose installed SGLang code is not the reviewed code can do."""

_STREAM_COVERAGE = (
    (H3_STREAMS_PATH, "MiniMax-H3 (and its subclasses)"),
    (STANDARD_STREAMS_PATH, "WanPipeline, HunyuanVideoPipeline"),
    (LTX2_STREAMS_PATH, "LTX2Pipeline"),
    (LTX2_TWO_STAGE_STREAMS_PATH, "LTX2TwoStagePipeline, LTX2TwoStageHQPipeline"),
)
"""Stream path -> the pipelines it draws in a named noise stream (exact classes but H3's)."""

_SHOWN_PATHS = tuple(path for path in PATHS if path != H3_RECORD_PATH)
"""The paths a user turns on by installing the plugin (the records' replica group is a detail of
`PRENOISE_NOISE_RECORD`, shown only when it is off)."""


@dataclass(frozen=True)
class SglangStatus:
    """The plugin as the next SGLang diffusion process here would load it."""

    sglang_version: str | None
    """The installed sglang release, None when it is not installed."""
    entry_point: str | None
    """`module:function` registered under `sglang.multimodal_gen.plugins` as `prenoise`."""
    allow_list: str | None
    """`SGLANG_PLUGINS` (an allow-list by entry-point name), None when unset or empty."""
    enable: str | None
    """`PRENOISE_SGLANG` as set (None when unset: on)."""
    stream: str
    """`PRENOISE_SGLANG_NOISE_STREAM`'s stream, or why its value is refused."""
    stream_ok: bool
    code: support.Support | None = None
    """The paths the installed SGLang code runs (None: sglang is not installed)."""

    @property
    def allowed(self) -> bool:
        if self.allow_list is None:
            return True
        return ENTRY_POINT_NAME in {n.strip() for n in self.allow_list.split(",")}  # SGLang's

    @property
    def verdict(self) -> str:
        """One line: whether SGLang's diffusion processes will run the plugin, and if not why."""
        if self.sglang_version is None:
            return "inactive: sglang is not installed here"
        if self.entry_point is None:
            return "inactive: the entry point is not registered (reinstall prenoise)"
        if not self.allowed:
            return f"inactive: {ALLOW_LIST_ENV}={self.allow_list!r} does not name 'prenoise'"
        if self.enable == "0":
            return f"inactive: disabled by {ENABLE_ENV}=0"
        if self.enable not in (None, "", "1"):
            return f"inactive: {ENABLE_ENV}={self.enable!r} is not 0 or 1 (registers nothing)"
        if not self.stream_ok:
            return f"inactive: {self.stream} (registers nothing)"
        assert self.code is not None
        on = [path for path in _SHOWN_PATHS if self.code.runs(path)]
        if not on:
            return "inactive: every path runs upstream's code untouched here"
        off = [path for path in _SHOWN_PATHS if not self.code.runs(path)]
        text = f"active in every SGLang diffusion process for: {'; '.join(on)}"
        return text + (f" (off here: {'; '.join(off)})" if off else "")

    def rows(self) -> list[tuple[str, str]]:
        """`prenoise doctor`'s rows: the verdict, the installed code, one row per path (each
        one off naming the changed function and the next step), `sglang-verify`, settings."""
        version = self.sglang_version or "not installed"
        if self.code is not None:
            release = self.code.release
            version += f" (code of {release})" if release else " (no reviewed release's code)"
        return [
            ("SGLang plugin", self.verdict),
            ("sglang", version),
            *self._path_rows(),
            # the group (29 characters) in the value: doctor's label column is 26 wide
            ("entry point", f"{ENTRY_POINT_GROUP}: {self.entry_point or 'not registered'}"),
            (ALLOW_LIST_ENV, self.allow_list if self.allow_list is not None else "(unset)"),
            ("plugin settings", self._settings_text()),
        ]

    def _settings_text(self) -> str:
        """The settings as their variables (a refused stream value: why)."""
        enable = "(unset)" if self.enable is None else self.enable
        stream = self.stream if self.stream_ok else f"refused: {self.stream}"
        return f"{ENABLE_ENV}={enable} {NOISE_STREAM_ENV}={stream}"

    def _streams_text(self) -> str:
        """Which pipelines `PRENOISE_SGLANG_NOISE_STREAM=x86|libm` draws in a named stream here
        (every other pipeline's request fails under a named stream)."""
        assert self.code is not None
        covered = [name for path, name in _STREAM_COVERAGE if self.code.runs(path)]
        refused = [name for path, name in _STREAM_COVERAGE if not self.code.runs(path)]
        text = f"x86/libm cover {', '.join(covered) if covered else 'no pipeline'}"
        if refused:
            text += f"; refused here (changed code): {', '.join(refused)}"
        return text + "; any other pipeline's request is refused under a named stream"

    def _path_rows(self) -> list[tuple[str, str]]:
        if self.code is None:
            return []
        code = self.code
        rows = []
        for path in PATHS:
            if code.runs(path):
                if path != H3_RECORD_PATH:
                    rows.append((path, "on (the reviewed code)"))
            else:
                rows.append(
                    (path, f"off, upstream's code runs: {code.problems[path]}; {NEXT_STEP}")
                )
        rows.append(("noise streams", self._streams_text()))
        if code.h3_initial:
            verify = "proves MiniMax-H3's noise prepared ahead by prenoise (plugin off vs on)"
        else:
            verify = (
                "exits 1 here: MiniMax-H3 initial noise prepared ahead is off, so prenoise "
                "prepares nothing for it to prove"
            )
        rows.append(("sglang-verify", verify))
        return rows


def _entry_point() -> str | None:
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == ENTRY_POINT_NAME:
            return entry.value
    return None


def sglang_status(environ: Mapping[str, str] | None = None) -> SglangStatus:
    """The plugin's status from metadata, `environ` (default: the process's) and the
    installed source files; imports nothing of SGLang."""
    env = os.environ if environ is None else environ
    try:
        version: str | None = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        version = None
    try:
        stream, stream_ok = setting(env), True
    except NoiseStreamError as error:
        stream, stream_ok = str(error), False
    allow = env.get(ALLOW_LIST_ENV, "").strip() or None
    return SglangStatus(
        sglang_version=version,
        entry_point=_entry_point(),
        allow_list=allow,
        enable=None if env.get(ENABLE_ENV) is None else env[ENABLE_ENV].strip(),
        stream=stream,
        stream_ok=stream_ok,
        code=support.current() if version is not None else None,
    )
