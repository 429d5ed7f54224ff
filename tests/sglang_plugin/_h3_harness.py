"""Shared harness of the SGLang plugin tests: the package's one copy
(`prenoise.integrations.sglang.harness`, which `prenoise sglang-verify` runs too), under the
names the tests import."""

from __future__ import annotations

from prenoise.integrations.sglang.harness import (
    STEPS,
    FakeH3DiT,
    FakeVideoVAE,
    capture,
    encode_visual,
    fingerprint,
    make_request,
    recorded_draws,
    recorded_loops,
    recorded_serves,
    run,
    run_group,
    same,
    tensors,
)

__all__ = [
    "STEPS",
    "FakeH3DiT",
    "FakeVideoVAE",
    "capture",
    "encode_visual",
    "fingerprint",
    "make_request",
    "recorded_draws",
    "recorded_loops",
    "recorded_serves",
    "run",
    "run_group",
    "same",
    "tensors",
]
