"""`vllm-omni-verify --upstream-overlap`: upstream's own overlap proven bitwise (0.32.0rc1 on).

vllm-omni 0.32.0rc1 draws a Ref2VA request's first output ahead itself while the prompt and the
media encode (`_prepare_local_conditioning`, given the request context). Three arms of upstream's
real `forward`, in this process, from the same global RNG state:

1. upstream's serial path: the plugin off, upstream's own draw ahead disabled
   (`_prepare_local_conditioning` called without a request context, which upstream's code reads
   as "nothing to precompute": every draw then happens in `_build_denoise_inputs`);
2. upstream's overlap: the plugin off, upstream's code as shipped;
3. prenoise on top: the plugin on (what upstream still draws serially, drawn ahead by prenoise).

`upstream` compares 1 with 2 (every `_build_denoise_inputs` field, the noise fields, what
`forward` returns and the global RNG; verified only if upstream really drew the first output ahead
in 2 and nothing ahead in 1); `plugin` compares 1 with 3 (the plugin's usual verdict).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from prenoise.integrations.vllm_omni.h3_request import H3Request
from prenoise.integrations.vllm_omni.standins import StandInHooks
from prenoise.integrations.vllm_omni.verification import VerifyResult, run_arm

__all__ = ["UpstreamOverlapResult", "upstream_draws_ahead", "verify_upstream_overlap"]


def upstream_draws_ahead() -> bool:
    """Whether the installed `_prepare_local_conditioning` can draw ahead (takes a request
    context, as 0.32.0rc1's does)."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    method = upstream.MiniMaxH3Pipeline._prepare_local_conditioning
    return "request_context" in inspect.signature(method).parameters


@contextlib.contextmanager
def upstream_serial() -> Iterator[None]:
    """Upstream's own draw ahead disabled: `_prepare_local_conditioning` without a context."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    cls = upstream.MiniMaxH3Pipeline
    original = cls.__dict__["_prepare_local_conditioning"]

    @functools.wraps(original)
    def serial(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **{**kwargs, "request_context": None})

    cls._prepare_local_conditioning = serial
    try:
        yield
    finally:
        cls._prepare_local_conditioning = original


@dataclass
class UpstreamOverlapResult:
    """Upstream's serial path vs its overlap, and vs prenoise on top."""

    upstream: VerifyResult
    plugin: VerifyResult

    @property
    def verified(self) -> bool:
        return self.upstream.verified and self.plugin.verified

    def summary(self) -> str:
        return (
            f"upstream's overlap vs its serial path: {self.upstream.summary()}\n"
            f"prenoise on top vs upstream's serial path: {self.plugin.summary()}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "verified": self.verified,
            "upstream_overlap": self.upstream.to_json(),
            "plugin": self.plugin.to_json(),
        }


def verify_upstream_overlap(
    request: H3Request, *, hooks: StandInHooks | None = None
) -> UpstreamOverlapResult:
    """The three arms (see the module's docstring); `ValueError` where upstream draws nothing
    ahead itself (0.30/0.31: there is no upstream overlap to prove)."""
    if not upstream_draws_ahead():
        raise ValueError(
            "this vllm-omni draws nothing ahead itself (its _prepare_local_conditioning takes no "
            "request context): there is no upstream overlap to verify"
        )
    state = torch.get_rng_state()
    with upstream_serial():
        serial = run_arm(request, plugin_on=False, hooks=hooks)
    torch.set_rng_state(state)
    overlapped = run_arm(request, plugin_on=False, hooks=hooks)
    torch.set_rng_state(state)
    on = run_arm(request, plugin_on=True, hooks=hooks)
    return UpstreamOverlapResult(
        VerifyResult.of(serial, overlapped, upstream_overlap=True), VerifyResult.of(serial, on)
    )
