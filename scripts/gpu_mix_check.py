"""Check the exact condition mix on a device against the CPU float32 reference, bit for bit.

    python scripts/gpu_mix_check.py --device cuda --json mix.json
    python scripts/gpu_mix_check.py --device cpu --json mix.json --numel 50000 --no-compile

`prenoise.preparation.mixing` promises that `mix_condition` / `mix_conditions` give the same bits
on any device as on the CPU, for eager elementwise kernels. This script runs them on `--device`
for float32, float16 and bfloat16 (several taus; clean rows contiguous and not; noise on the CPU,
as the pipeline passes it, and on the device; with and without `out=`; several conditions at once)
and compares every result with the same call on CPU copies of the inputs. The CPU results are
themselves compared with the documented formula written out in numpy (float32 coefficients, two
products and one sum, each rounded to the dtype), so a wrong reference cannot pass either.

vLLM-Omni 0.32.0rc1 mixes MiniMax-H3's visual conditions on the output device when that is an
NPU (its coefficients still rounded in CPU float32 first), and its timeline-guided recipe with
Python-float coefficients. `upstream_rules` runs both statements exactly as upstream writes them
on `--device` (float32, the dtype upstream mixes in) and compares them with prenoise's mixes there
(`mix_condition`; `h3_mix.mix_guided_rows`' statement) and with the CPU: whether prenoise's rule
holds on this device too.

A `torch.compile` variant is run too and reported on its own: compiled kernels may fuse the two
products and the sum (no intermediate rounding), which the contract does not cover. Its result
never changes the exit status.

Exit status: 0 when every eager case is bitwise equal, 1 when one is not, 2 when the device cannot
be used. `--device cpu` runs the same cases with the CPU as the device (the test suite does).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import prenoise
from prenoise.preparation.mixing import mix_condition, mix_conditions

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
TAUS = (0.0, 0.3, 0.999, 1.0)
COMPILED_TAU = 0.999  # the recipes' tau_visual
#: Elements of the large case: the seed workload's condition noise [1, 24, 108, 48, 84].
SEED_CONDITION_NUMEL = 24 * 108 * 48 * 84
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def differing_elements(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many elements differ in their bits; -1 when dtype or shape differ."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return -1
    view = _INT_VIEW[a.element_size()]
    a_bits, b_bits = a.cpu().contiguous().view(view), b.cpu().contiguous().view(view)
    return int((a_bits != b_bits).sum())


def _round_to(x: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """float32 values rounded to `dtype` (nearest, ties to even), widened back to float32."""
    if dtype == torch.float32:
        return x
    if dtype == torch.float16:
        return x.astype(np.float16).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)  # bfloat16 by hand on the bits (no NaNs here)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def formula(clean: torch.Tensor, noise: torch.Tensor, tau: float) -> torch.Tensor:
    """The contract written out in numpy: `round(round(c·tau) + round(n·(1 − tau)))`, with
    `tau` and `1 − tau` float32 and every operation in float32. tau == 1 returns the clean rows."""
    if tau == 1.0:
        return clean.contiguous()
    dtype = clean.dtype
    c, n = clean.float().contiguous().numpy(), noise.float().contiguous().numpy()
    t = np.float32(tau)
    one_minus = np.float32(1.0) - t
    out = _round_to(_round_to(c * t, dtype) + _round_to(n * one_minus, dtype), dtype)
    return torch.from_numpy(np.ascontiguousarray(out)).to(dtype)


def _rows(seed: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    return values.to(dtype)


class Cases:
    """Runs each case on the device and on the CPU and records the comparison."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.results: list[dict[str, Any]] = []

    def add(
        self,
        name: str,
        on_device: Callable[[], torch.Tensor],
        on_cpu: Callable[[], torch.Tensor],
        expected: torch.Tensor | None = None,
    ) -> None:
        got = on_device()
        if got.device.type != self.device.type:
            raise AssertionError(f"{name}: result on {got.device}, expected {self.device}")
        reference = on_cpu()
        entry: dict[str, Any] = {
            "case": name,
            "numel": reference.numel(),
            "differing_elements": differing_elements(got, reference),
        }
        if expected is not None:
            entry["cpu_differs_from_formula"] = differing_elements(reference, expected)
        entry["equal"] = entry["differing_elements"] == 0 and (
            entry.get("cpu_differs_from_formula", 0) == 0
        )
        self.results.append(entry)


def eager_cases(device: torch.device, dtype: torch.dtype, numel: int) -> list[dict[str, Any]]:
    """Every eager case for one dtype; see the module docstring."""
    cases = Cases(device)
    rows = max(1, numel // 84) + 1  # an odd row count: vector loops get a tail
    shapes = {
        "large": ((rows, 84), False),
        "odd": ((1001, 97), False),
        "non-contiguous": ((70, 96), True),  # the transpose of a [96, 70] tensor
    }
    for label, (shape, transposed) in shapes.items():
        clean_cpu = _rows(1, shape[::-1], dtype).t() if transposed else _rows(1, shape, dtype)
        noise_cpu = _rows(2, shape, dtype)
        clean_dev = clean_cpu.to(device)
        noise_dev = noise_cpu.to(device)
        for tau in TAUS:
            expected = formula(clean_cpu, noise_cpu, tau)

            def reference(c: torch.Tensor = clean_cpu, n: torch.Tensor = noise_cpu, t: float = tau):
                return mix_condition(c, n, t)

            cases.add(
                f"{label} tau={tau} noise=cpu",
                lambda c=clean_dev, n=noise_cpu, t=tau: mix_condition(c, n, t),
                reference,
                expected,
            )
            cases.add(
                f"{label} tau={tau} noise=device",
                lambda c=clean_dev, n=noise_dev, t=tau: mix_condition(c, n, t),
                reference,
                expected,
            )

            def with_out(c: torch.Tensor = clean_dev, n: torch.Tensor = noise_cpu, t: float = tau):
                out = torch.full(c.shape, float("nan"), dtype=c.dtype, device=c.device)
                return mix_condition(c, n, t, out=out)

            cases.add(f"{label} tau={tau} out=", with_out, reference, expected)
    # several conditions: a non-contiguous block takes the per-block + cat path; blocks that
    # share device, dtype and row shape are mixed straight into the result's rows
    a, c = _rows(3, (40, 96), dtype), _rows(4, (30, 96), dtype)
    b = _rows(5, (96, 50), dtype).t()
    noise = _rows(6, (120, 96), dtype)
    taus = [0.999, 0.3, 1.0]
    cases.add(
        "mix_conditions non-contiguous block",
        lambda: mix_conditions([a.to(device), b.to(device), c.to(device)], noise, taus),
        lambda: mix_conditions([a, b, c], noise, taus),
    )
    noise2 = noise[:70]
    cases.add(
        "mix_conditions into one buffer",
        lambda: mix_conditions([a.to(device), c.to(device)], noise2, [0.999, 0.25]),
        lambda: mix_conditions([a, c], noise2, [0.999, 0.25]),
    )
    return cases.results


def compiled_case(device: torch.device, dtype: torch.dtype, numel: int) -> dict[str, Any]:
    """`torch.compile(mix_condition)` on the large case at tau 0.999: reported, never required."""
    rows = max(1, numel // 84) + 1
    clean, noise = _rows(1, (rows, 84), dtype), _rows(2, (rows, 84), dtype)
    reference = mix_condition(clean, noise, COMPILED_TAU)
    started = time.perf_counter()
    try:
        compiled = torch.compile(mix_condition, dynamic=False)
        got = compiled(clean.to(device), noise.to(device), COMPILED_TAU)
        differing = differing_elements(got, reference)
    except Exception as exc:  # a compiler that does not work here is a result, not a crash
        return {
            "status": "error",
            "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            "seconds": round(time.perf_counter() - started, 3),
        }
    return {
        "status": "equal" if differing == 0 else "differs",
        "tau": COMPILED_TAU,
        "numel": reference.numel(),
        "differing_elements": differing,
        "seconds": round(time.perf_counter() - started, 3),
    }


def upstream_rules(device: torch.device, numel: int) -> list[dict[str, Any]]:
    """vLLM-Omni 0.32.0rc1's two mixing statements run on `device` (see the module docstring)."""
    cases = Cases(device)
    rows = max(1, numel // 96) + 1
    clean_cpu, noise_cpu = _rows(7, (rows, 96), torch.float32), _rows(8, (rows, 96), torch.float32)
    clean, noise = clean_cpu.to(device), noise_cpu.to(device)
    tau = 0.999  # MINIMAX_H3_IMGVID_COND_TIMESTEP

    def upstream_dependent(c: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        # condition_noise.minimax_h3_imgvid_cond_noise_aug_rows, 0.32.0rc1, on c's device
        timestep = torch.tensor(tau, dtype=torch.float32, device="cpu")
        noise_timestep = 1.0 - timestep
        timestep, noise_timestep = timestep.to(c.device), noise_timestep.to(c.device)
        out = torch.empty(c.shape, dtype=torch.float32, device=c.device)
        torch.add(timestep * c, noise_timestep * n, out=out)
        return out

    def upstream_guided(c: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        out = torch.empty(c.shape, dtype=torch.float32, device=c.device)
        out[:] = tau * c + (1.0 - tau) * n
        return out

    expected = formula(clean_cpu, noise_cpu, tau)
    cases.add(
        "0.32 dependent statement on device vs prenoise on the CPU",
        lambda: upstream_dependent(clean, noise),
        lambda: mix_condition(clean_cpu, noise_cpu, tau),
        expected,
    )
    cases.add(
        "prenoise mix_condition on device vs 0.32 dependent statement on the CPU",
        lambda: mix_condition(clean, noise_cpu, tau),
        lambda: upstream_dependent(clean_cpu, noise_cpu),
        expected,
    )
    cases.add(
        "0.32 guided statement on device vs on the CPU",
        lambda: upstream_guided(clean, noise),
        lambda: upstream_guided(clean_cpu, noise_cpu),
    )
    return cases.results


def run(device: torch.device, numel: int, compile_too: bool) -> dict[str, Any]:
    """All cases for every dtype, as the JSON report."""
    report: dict[str, Any] = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "prenoise": str(Path(prenoise.__file__).parent),
        "reference": "the same call on CPU copies of the inputs (float32 coefficients on the CPU), "
        "checked against the numpy formula",
        "dtypes": {},
    }
    for name, dtype in DTYPES.items():
        started = time.perf_counter()
        cases = eager_cases(device, dtype, numel)
        failed = [c["case"] for c in cases if not c["equal"]]
        entry: dict[str, Any] = {
            "eager": {
                "equal": not failed,
                "cases": len(cases),
                "failed_cases": failed,
                "seconds": round(time.perf_counter() - started, 3),
                "details": cases,
            }
        }
        entry["compiled"] = (
            compiled_case(device, dtype, numel)
            if compile_too
            else {"status": "skipped", "reason": "--no-compile"}
        )
        report["dtypes"][name] = entry
    rules = upstream_rules(device, numel)
    report["upstream_rules"] = {"equal": all(c["equal"] for c in rules), "cases": rules}
    report["equal"] = report["upstream_rules"]["equal"] and all(
        d["eager"]["equal"] for d in report["dtypes"].values()
    )
    return report


def _device(name: str) -> torch.device:
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise SystemExit(f"error: bad --device {name!r}: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but torch sees no CUDA device")
    torch.empty(1, device=device)  # fails here, not in the first case, if the device is unusable
    return device


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="device to check (default: cuda)")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument(
        "--numel",
        type=int,
        default=SEED_CONDITION_NUMEL,
        help="elements of the large case (default: the seed workload's condition noise)",
    )
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    args = parser.parse_args(argv)
    try:
        device = _device(args.device)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        report = run(device, args.numel, not args.no_compile)
    except Exception:
        traceback.print_exc()
        return 1
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    for name, entry in report["dtypes"].items():
        eager, compiled = entry["eager"], entry["compiled"]
        verdict = "equal" if eager["equal"] else f"DIFFERS in {eager['failed_cases']}"
        print(f"{name}: eager {verdict} ({eager['cases']} cases); compiled {compiled['status']}")
    rules = report["upstream_rules"]
    failed = [c["case"] for c in rules["cases"] if not c["equal"]]
    print(f"vllm-omni 0.32 mixing rules: {'equal' if not failed else f'DIFFER in {failed}'}")
    print(
        f"device {report['device']}: {'all eager cases equal' if report['equal'] else 'MISMATCH'}"
    )
    return 0 if report["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
