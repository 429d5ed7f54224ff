"""Which of the plugin's paths run on the installed vLLM-Omni, decided by its code (`digests`).

`current()` answers once per process (`reset()` forgets it, for tests): each path of
`reviewed.PATHS` runs only where every function it relies on has a reviewed digest; otherwise
`Support.problems` names the first function that is not the reviewed code, and that path runs
upstream's code untouched:

- MiniMax-H3 noise streams: with a changed draw function or caller, no MiniMax-H3 function is
  wrapped but `forward`, which passes every request straight to upstream's (native) or refuses it
  (a named stream: `NoiseStreamError`, never silently native);
- MiniMax-H3 noise prepared ahead: prenoise prepares nothing for MiniMax-H3 (its draws still go
  through the stream wrappers);
- Wan2.2 T2V latents prepared ahead: `Wan22Pipeline.forward` runs upstream's draw.

`upstream_prepares_ref2va`: the installed `_prepare_local_conditioning` is one that draws a Ref2VA
request's first output ahead itself (vllm-omni 0.32.0rc1): prenoise leaves that draw to upstream.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from prenoise.integrations.vllm_omni import digests
from prenoise.integrations.vllm_omni.reviewed import (
    H3_AHEAD_PATH,
    H3_STREAMS_PATH,
    PATHS,
    RELEASES,
    UPSTREAM_PREPARES_REF2VA,
    WAN_AHEAD_PATH,
)
from prenoise.integrations.vllm_omni.settings import NOISE_STREAM_ENV

__all__ = [
    "H3_AHEAD_PATH",
    "H3_PATHS",
    "H3_STREAMS_PATH",
    "NEXT_STEP",
    "WAN_AHEAD_PATH",
    "Support",
    "current",
    "off_line",
    "reset",
]

H3_PATHS = (H3_STREAMS_PATH, H3_AHEAD_PATH)
"""The MiniMax-H3 paths (what `vllm-omni-verify` exercises)."""
NEXT_STEP = (
    f"prenoise supports the code of vllm-omni {', '.join(RELEASES)}: install one of them, or "
    "report the changed function to prenoise"
)
"""What to do about a path that is off: every line naming a changed function ends with it."""

_PREPARE_LOCAL = (
    "vllm_omni.diffusion.models.minimax_h3.pipeline_minimax_h3:"
    "MiniMaxH3Pipeline._prepare_local_conditioning"
)
_lock = threading.Lock()
_current: Support | None = None


@dataclass(frozen=True)
class Support:
    """The plugin's paths on the installed vLLM-Omni."""

    problems: dict[str, str] = field(default_factory=dict)
    """path -> why it runs upstream's code (the first function that is not the reviewed code)."""
    upstream_prepares_ref2va: bool = False
    """Upstream draws a Ref2VA request's first output ahead itself (never drawn twice)."""
    release: str | None = None
    """The reviewed release whose code is installed (for log lines only; None: no single one)."""

    def runs(self, path: str) -> bool:
        return path not in self.problems

    @property
    def h3_streams(self) -> bool:
        return self.runs(H3_STREAMS_PATH)

    @property
    def h3_ahead(self) -> bool:
        return self.runs(H3_AHEAD_PATH)

    @property
    def wan_ahead(self) -> bool:
        return self.runs(WAN_AHEAD_PATH)

    def describe(self) -> str:
        """For the install line: the code it equals and the paths that run."""
        code = f"code of {self.release}" if self.release else "code of no single reviewed release"
        on = [path for path in PATHS if self.runs(path)]
        ahead = "; Ref2VA's first output drawn ahead by upstream" * self.upstream_prepares_ref2va
        return f"{code}; on: {', '.join(on) or 'nothing'}{ahead}"


def off_line(path: str, problem: str, version: str | None) -> str:
    """The one line naming why `path` runs upstream's code on this vllm-omni (`version`): what
    runs instead, the first function that is not the reviewed code with the releases its
    reviewed digests come from, and what to do (`NEXT_STEP`). The plugin logs it once per
    process; `vllm-omni-verify` and `prenoise doctor` print it."""
    if path == H3_STREAMS_PATH:
        what = (
            "MiniMax-H3 runs upstream's code untouched (noise streams and noise prepared ahead "
            f"off); with a named {NOISE_STREAM_ENV} its requests fail (NoiseStreamError)"
        )
    else:
        what = f"{path}: off, upstream's code runs untouched"
    return f"prenoise: vllm-omni {version}: {what}: {problem}; {NEXT_STEP}"


def current() -> Support:
    """The installed code's support, computed once per process."""
    global _current
    with _lock:
        if _current is None:
            problems = {path: problem for path in PATHS if (problem := digests.path_problem(path))}
            try:
                prepares = digests.installed_digest(_PREPARE_LOCAL) in UPSTREAM_PREPARES_REF2VA
            except digests.CodeUnavailable:
                prepares = False
            _current = Support(problems, prepares, digests.installed_release())
        return _current


def reset() -> None:
    """Forget the computed support and digests (tests that swap vLLM-Omni's files)."""
    global _current
    with _lock:
        _current = None
    digests.reset()
