"""`torchrun … prenoise verify`: every rank's prepared fields against rank 0 and one process.

Each rank prepares the request (host-shared or per-rank, as configured) keeping the noise, and
digests every prepared field (`prepared_fields`: the contract's noise fields as drawn and every
denoise input) as sha256 of the values plus shape, dtype and strides. The digests are
all-gathered; rank 0 also prepares the request once more in plain single-process serial mode.
`equal` is True only when every rank's digests equal rank 0's, rank 0's equal the single-process
ones, and no rank's global RNG state changed. The verdict is broadcast, so every rank agrees.

With `parallel.text_encoder_tp > 1` the ranks still agree bitwise, but the sharded encoder sums in
a different order than one process: the reference then uses the replicated encoder gathered from
the shards, `denoise.text` is compared by max abs difference (≤ `TP_TOLERANCE`, reported as
`text_tp_max_error`) and every other field stays bitwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from prenoise.distributed.request import ResolvedRequest
from prenoise.distributed.runner import DistributedRef2VA
from prenoise.distributed.tensor_parallel import TP_TOLERANCE
from prenoise.ref2va.pipeline import Arm, PreparedOutput, Ref2VAPipeline
from prenoise.ref2va.text_encoder import TextEncoder
from prenoise.ref2va.verification import prepared_fields
from prenoise.verify import tensor_sha256
from prenoise.verify.rng_guard import snapshot_global_rng

__all__ = [
    "DistributedVerifyResult",
    "FieldDigest",
    "field_digests",
    "single_process_digests",
    "verify_distributed",
]


@dataclass(frozen=True)
class FieldDigest:
    """sha256 of a field's values (logical order) with its shape, dtype and strides."""

    sha256: str
    shape: tuple[int, ...]
    dtype: str
    stride: tuple[int, ...]

    @classmethod
    def of(cls, t: torch.Tensor) -> FieldDigest:
        """Digest one tensor."""
        return cls(tensor_sha256(t), tuple(t.shape), str(t.dtype), tuple(t.stride()))


Digests = dict[str, FieldDigest | None]


def field_digests(outputs: list[PreparedOutput]) -> Digests:
    """Digests of `prepared_fields(outputs)` (None for an absent field)."""
    return {
        name: None if t is None else FieldDigest.of(t)
        for name, t in prepared_fields(outputs).items()
    }


def single_process_digests(pipeline: Ref2VAPipeline, request: ResolvedRequest) -> Digests:
    """Digests of a plain single-process serial preparation of the same request."""
    outputs, _ = pipeline.prepare_outputs(request.plan, "serial", keep_noise=True)
    return field_digests(outputs)


def _differences(name: str, a: Digests, b: Digests) -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append(f"{name}: {key} differs ({a.get(key)} vs {b.get(key)})")
    return out


@dataclass
class DistributedVerifyResult:
    """The verdict of one distributed verification (identical on every rank)."""

    equal: bool
    world_size: int
    host_shared: bool
    rng_state_unchanged: list[bool]
    differences: list[str]
    digests: Digests
    fallbacks: list[str]
    text_tp_max_error: float | None = None  # text encoder TP only: |denoise.text − 1 process|

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: verdict, per-rank RNG check, differences and rank 0's digests."""
        return {
            "equal": self.equal,
            "world_size": self.world_size,
            "host_shared_noise": self.host_shared,
            "rng_state_unchanged": self.rng_state_unchanged,
            "differences": self.differences,
            "prediction_fallbacks": self.fallbacks,
            "text_tp_max_error": self.text_tp_max_error,
            "fields": {k: None if v is None else asdict(v) for k, v in self.digests.items()},
        }

    def summary(self) -> str:
        """One line for the terminal."""
        n = len(self.digests)
        mode = "host-shared" if self.host_shared else "per-rank"
        if self.equal and self.text_tp_max_error is not None:
            return (
                f"bitwise equal: {n} fields on all {self.world_size} ranks ({mode} noise) "
                f"= single process, except denoise.text within {self.text_tp_max_error:.1e} "
                "(text encoder TP); global RNG unchanged"
            )
        if self.equal:
            return (
                f"bitwise equal: {n} fields on all {self.world_size} ranks ({mode} noise) "
                "= single process; global RNG unchanged"
            )
        return f"DIFFERENT ({mode} noise): " + "; ".join(self.differences[:5])


def _tp_reference(
    runner: DistributedRef2VA,
    full: TextEncoder,
    request: ResolvedRequest,
    rank0: Digests,
    texts: dict[str, torch.Tensor | None],
) -> tuple[list[str], float]:
    """Rank 0 vs one process with the replicated encoder: `denoise.text` within `TP_TOLERANCE`,
    everything else bitwise. Returns the differences and the max abs text error."""
    pipeline = Ref2VAPipeline(replace(runner.models, text_encoder=full), device="cpu")
    outputs, _ = pipeline.prepare_outputs(request.plan, "serial", keep_noise=True)
    fields = prepared_fields(outputs)
    diffs, error = [], 0.0
    for key, mine in texts.items():
        ref = fields[key]
        if mine is None or ref is None or mine.shape != ref.shape:
            diffs.append(f"rank 0 vs single process: {key} missing or shaped differently")
            continue
        error = max(error, (mine - ref).abs().max().item())
    if error > TP_TOLERANCE:
        diffs.append(f"rank 0 vs single process: denoise.text max abs error {error:.3e}")
    single = {k: v for k, v in field_digests(outputs).items() if k not in texts}
    diffs += _differences(
        "rank 0 vs single process", {k: v for k, v in rank0.items() if k not in texts}, single
    )
    return diffs, error


def verify_distributed(
    runner: DistributedRef2VA,
    request: ResolvedRequest,
    arm: Arm = "overlapped",
    *,
    host_shared: bool | None = None,
    reference: bool = True,
    on_stage: Callable[[str], None] | None = None,
) -> DistributedVerifyResult:
    """Prepare on every rank and compare (see the module docstring). Collective: call on all.

    `on_stage` hears each stage's name as it starts, in the single-process `verify`'s words:
    `prepare: <arm> arm` (every rank), then on rank 0 `prepare: serial arm` (the single-process
    reference, with `reference`) and `compare`."""
    ctx = runner.ctx
    stage = on_stage or (lambda _name: None)
    stage(f"prepare: {arm} arm")
    before = snapshot_global_rng()
    prepared = runner.prepare(request, arm, keep_noise=True, host_shared=host_shared)
    rng_ok = not before.differences(snapshot_global_rng())
    mine = (field_digests(prepared.outputs), rng_ok, prepared.fallbacks)
    tp = runner.text_tp
    texts = {  # text encoder TP: compared with a tolerance, not bitwise
        k: v for k, v in prepared_fields(prepared.outputs).items() if k.endswith("denoise.text")
    }
    del prepared
    full = tp.gather_replicated() if reference and tp is not None else None  # collective
    text_error = None
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, mine, group=ctx.cpu_group)
    verdict: list[Any] = [None]
    if ctx.rank == 0:
        rank0 = gathered[0][0]
        reference_diffs: list[str] = []
        if reference:
            stage("prepare: serial arm")
        if reference and full is not None:
            reference_diffs, text_error = _tp_reference(runner, full, request, rank0, texts)
        elif reference:
            single = single_process_digests(runner.pipeline, request)
            reference_diffs = _differences("rank 0 vs single process", rank0, single)
        stage("compare")
        diffs: list[str] = []
        for r, (digests, _, _) in enumerate(gathered[1:], start=1):
            diffs += _differences(f"rank {r} vs rank 0", digests, rank0)
        diffs += reference_diffs
        rng = [bool(g[1]) for g in gathered]
        verdict[0] = DistributedVerifyResult(
            equal=not diffs and all(rng),
            world_size=ctx.world_size,
            host_shared=runner.parallel.host_shared_noise if host_shared is None else host_shared,
            rng_state_unchanged=rng,
            differences=diffs,
            digests=rank0,
            fallbacks=[f"rank {r}: {f}" for r, g in enumerate(gathered) for f in g[2]],
            text_tp_max_error=text_error,
        )
    dist.broadcast_object_list(verdict, src=0, group=ctx.cpu_group)
    result = verdict[0]
    assert isinstance(result, DistributedVerifyResult)
    return result


def denoise_max_error(runner: DistributedRef2VA, request: ResolvedRequest) -> float:
    """Max |sequence-parallel − single-process| over the first output's final video and audio
    rows (collective; the value on every rank). Rank 0 also denoises the same prepared inputs in
    one process. The prepared inputs themselves are bitwise equal (see `verify_distributed`)."""
    plan = request.plan
    prepared = runner.prepare(request)
    single_inputs = None
    # a second, private set of the same inputs for the reference (on every rank with text
    # encoder TP, whose encoding is collective; kept on rank 0 only)
    if runner.ctx.rank == 0 or runner.text_tp is not None:
        single_inputs = runner.pipeline.prepare(plan, "serial")[1]
    if runner.ctx.rank != 0:
        single_inputs = None
    video, audio = runner.denoise(plan, prepared.outputs[0])
    error = [0.0]
    if single_inputs is not None:
        ref_video, ref_audio = runner.pipeline.denoise(plan, single_inputs)
        error[0] = max(
            (video - ref_video).abs().max().item(), (audio - ref_audio).abs().max().item()
        )
    dist.broadcast_object_list(error, src=0, group=runner.ctx.cpu_group)
    return float(error[0])
