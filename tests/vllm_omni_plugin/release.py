"""The vllm-omni release under test, as the plugin sees its code (`support.current()`).

The plugin decides by the code, not the version string; the tests use the same answer to say
what each release must show (on 0.32.0rc1 upstream draws a Ref2VA request's first output ahead
itself, on its own worker thread).
"""

from __future__ import annotations

from prenoise.integrations.vllm_omni import support

CODE = support.current()
RELEASE = CODE.release
UPSTREAM_AHEAD = CODE.upstream_prepares_ref2va
"""Upstream draws a Ref2VA request's first output ahead itself (0.32.0rc1)."""
UPSTREAM_WORKER = "minimax_h3_initial_noise"
"""The thread-name prefix of upstream's own worker (0.32.0rc1)."""
PRENOISE_WORKER = "prenoise-vllm-omni"


def first_output_worker() -> str:
    """The thread-name prefix a Ref2VA first output's noise is drawn on with the plugin on."""
    return UPSTREAM_WORKER if UPSTREAM_AHEAD else PRENOISE_WORKER
