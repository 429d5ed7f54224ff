"""MiniMax-H3 output seeds as upstream reads them, and the seeds torch really uses."""

from __future__ import annotations

from typing import Any

__all__ = ["TORCH_SEED_MAX", "TORCH_SEED_MIN", "num_outputs", "request_seed", "torch_seed"]

TORCH_SEED_MIN = -(2**63)
TORCH_SEED_MAX = 2**64 - 1


def torch_seed(seed: int) -> int | None:
    """The seed `torch.Generator.manual_seed(seed)` really uses, or None where it raises.

    torch takes `-2^63 … 2^64 − 1` and maps a negative `s` to `2^64 + s` (vLLM-Omni's API
    accepts any int64 seed, and H3 seeds its generators with it unchanged): preparing ahead with
    the mapped seed draws exactly upstream's noise. Outside that range upstream's own
    `manual_seed` raises, so the request is left to upstream.
    """
    if not TORCH_SEED_MIN <= seed <= TORCH_SEED_MAX:
        return None
    return seed % 2**64


def request_seed(sampling: Any) -> int | None:
    """The request's first output seed as upstream reads it; None where `int()` refuses it."""
    # Upstream's rule (`_prepare_request_inputs`: `int(sampling.seed if not None else 42)`); a
    # different seed at consumption time is a mismatch like any other, never different noise.
    # A seed `int()` refuses is upstream's to reject (None: prenoise prepares nothing).
    seed = getattr(sampling, "seed", None)
    try:
        return int(seed if seed is not None else 42)
    except (TypeError, ValueError, OverflowError):
        return None


def num_outputs(sampling: Any) -> int:
    """The request's output count by upstream's own rule (1 where upstream will refuse it)."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    try:
        return int(upstream._resolve_minimax_h3_num_outputs(sampling.num_outputs_per_prompt))
    except Exception:
        return 1  # upstream rejects the request later with its own error
