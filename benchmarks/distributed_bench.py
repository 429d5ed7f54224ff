"""Per-rank drawing vs host-shared preparation under torchrun, for 2 and 4 CPU ranks (gloo).

Runs `torchrun --standalone --nproc-per-node N -m prenoise bench --recipe R --json …` for each N
and prints one table per N from the JSON summaries (see `prenoise.distributed.bench` for what is
measured). Every rank loads the models and decodes the reference itself; OMP_NUM_THREADS=1 per
rank (torchrun's default).

    .venv/bin/python benchmarks/distributed_bench.py \
        --recipe recipes/ref2va-15s-1344x768.yaml --ranks 2 4 --pairs 3 --warmup 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROWS = (
    ("wall_s", "preparation wall time (s, slowest rank)", 1.0),
    ("host_cpu_s", "host CPU seconds (all ranks, all threads)", 1.0),
    ("host_draw_s", "host drawing seconds (sum of ranks)", 1.0),
    ("max_rank_draw_s", "drawing seconds of the busiest rank", 1.0),
    ("max_rank_wait_s", "request-thread wait for noise (s, max rank)", 1.0),
    ("host_encode_s", "host encoding seconds (sum of ranks)", 1.0),
    ("host_peak_pss_delta_bytes", "host peak Pss above baseline (MiB)", 2**20),
    ("host_peak_pss_bytes", "host peak Pss, all ranks (MiB)", 2**20),
    ("host_held_noise_bytes", "initial noise held for denoising, host (MiB)", 2**20),
)


def run(recipe: str, ranks: int, pairs: int, warmup: int, out_dir: Path) -> dict[str, Any]:
    """One torchrun bench; returns its JSON summary."""
    out = out_dir / f"distributed-{ranks}ranks.json"
    cmd = [
        str(Path(sys.executable).with_name("torchrun")),
        "--standalone",
        f"--nproc-per-node={ranks}",
        "-m",
        "prenoise",
        "bench",
        "--recipe",
        recipe,
        "--pairs",
        str(pairs),
        "--warmup",
        str(warmup),
        "--json",
        str(out),
    ]
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"{ranks} ranks: {time.perf_counter() - start:.0f} s including start-up", flush=True)
    return json.loads(out.read_text())


def table(summary: dict[str, Any]) -> str:
    """A markdown table of the medians, per-rank vs host-shared."""
    med = summary["medians"]
    lines = [
        f"**{summary['ranks']} ranks** ({summary['pairs']} pairs, median per request)",
        "",
        "| metric | per-rank drawing | host-shared | change |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, label, scale in ROWS:
        a, b = med["per_rank"][key] / scale, med["host_shared"][key] / scale
        change = f"{(b - a) / a * 100:+.0f}%" if a else "n/a"
        lines.append(f"| {label} | {a:.3f} | {b:.3f} | {change} |")
    return "\n".join(lines)


def tolerance_rank(recipe: str, steps: int) -> float:
    """One rank of the sequence-parallel tolerance check (run through `spawn_ranks`)."""
    import torch

    from prenoise.distributed.group import init_distributed
    from prenoise.distributed.request import broadcast_request
    from prenoise.distributed.runner import DistributedRef2VA
    from prenoise.distributed.verification import denoise_max_error
    from prenoise.ref2va.config import ParallelConfig, load_recipe
    from prenoise.ref2va.models import Ref2VAModels

    torch.set_num_threads(1)
    parsed = load_recipe(recipe, steps=steps)
    ctx = init_distributed(600.0)
    request = broadcast_request(ctx, parsed if ctx.rank == 0 else None)
    models = Ref2VAModels.default(parsed.model)
    runner = DistributedRef2VA(ctx, models, ParallelConfig(timeout_s=600.0))
    return denoise_max_error(runner, request)


def tolerance(recipe: str, ranks: int, steps: int) -> float:
    """Max |sequence-parallel − single-process| of the final rows after `steps` steps."""
    from prenoise.distributed.launch import spawn_ranks

    outcomes = spawn_ranks(tolerance_rank, ranks, (recipe, steps), timeout_s=1800)
    if not all(o.ok for o in outcomes):
        raise RuntimeError([o.error for o in outcomes])
    return float(outcomes[0].value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/ref2va-15s-1344x768.yaml")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out-dir", type=Path, default=Path("outputs/distributed-bench"))
    parser.add_argument(
        "--tolerance-steps", type=int, help="also measure SP vs one process after N steps"
    )
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.tolerance_steps:
        for ranks in args.ranks:
            err = tolerance(args.recipe, ranks, args.tolerance_steps)
            print(f"{ranks} ranks, {args.tolerance_steps} steps: max abs error {err:.3e}")
    for ranks in args.ranks if args.pairs > 0 else ():
        summary = run(args.recipe, ranks, args.pairs, args.warmup, args.out_dir)
        print(table(summary), flush=True)
        print(flush=True)


if __name__ == "__main__":
    main()
