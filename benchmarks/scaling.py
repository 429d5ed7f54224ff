"""Preparation cost vs request duration, both arms (alternating pairs, same process).

    .venv/bin/python benchmarks/scaling.py [--durations 2 5 10 15 30] [--pairs 3]

For each duration D: the seed workload's geometry (1344x768, seed 2101) with a synthetic D-second
reference video with audio. Writes benchmarks/results/scaling.json and scaling.png.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from prenoise.ref2va.bench import BenchConfig, run_bench
from prenoise.ref2va.cli_options import load_models
from prenoise.ref2va.config import load_recipe
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.request_plan import plan_request

ROOT = Path(__file__).resolve().parent
SEED_RECIPE = ROOT.parent / "recipes" / "ref2va-15s-1344x768.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--durations", type=float, nargs="+", default=[2, 5, 10, 15, 30])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    base = load_recipe(SEED_RECIPE)
    pipeline = Ref2VAPipeline(load_models(base))
    rows = []
    for seconds in args.durations:
        reference = {
            "kind": "video",
            "path": f"outputs/scaling/reference-{seconds:g}s.mp4",
            "synthetic": {"seconds": seconds, "width": 1344, "height": 768},
        }
        recipe = load_recipe(SEED_RECIPE, duration=seconds, references=[reference])
        plan = plan_request(recipe)
        result = run_bench(pipeline, plan, BenchConfig(pairs=args.pairs, warmup=2))
        s = result.summary
        row = {"seconds": seconds, "frames": s["request"]["frames"]}
        for arm in ("serial", "overlapped"):
            for metric in ("prep_window_s", "noise_critical_s", "noise_worker_s"):
                row[f"{arm}.{metric}"] = s[arm][metric]["median"]
        row["delta.prep_window_s"] = s["delta"]["prep_window_s"]["median"]
        rows.append(row)
        print(json.dumps(row))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps(rows, indent=2))
    plot(rows, args.out / "scaling.png")


def plot(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seconds = [r["seconds"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for arm, style in (("serial", "o-"), ("overlapped", "s-")):
        left.plot(seconds, [r[f"{arm}.prep_window_s"] for r in rows], style, label=arm)
        right.plot(seconds, [r[f"{arm}.noise_critical_s"] * 1e3 for r in rows], style, label=arm)
    right.plot(
        seconds, [r["overlapped.noise_worker_s"] * 1e3 for r in rows], "^--", label="worker draw"
    )
    left.set(xlabel="request duration (s)", ylabel="preparation window (s)", title="window")
    right.set(xlabel="request duration (s)", ylabel="ms", title="noise on the request thread")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Ref2VA preparation vs duration (1344x768, median of alternating pairs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
