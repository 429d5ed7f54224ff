"""Markdown tables from `prenoise bench --json` files (used to write benchmarks/README.md).

.venv/bin/python benchmarks/report.py benchmarks/results/seed-15s.json [...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROWS = (
    ("prep_window_s", "preparation window (s)", 1.0, "{:.3f}"),
    ("noise_critical_s", "noise on the request thread (ms)", 1e3, "{:.1f}"),
    ("noise_worker_s", "noise on the worker (ms)", 1e3, "{:.1f}"),
    ("overlap_s", "worker noise under encoders (ms)", 1e3, "{:.1f}"),
    ("encode_s", "encoders (s)", 1.0, "{:.3f}"),
    ("mix_s", "condition mix (ms)", 1e3, "{:.1f}"),
    ("peak_rss_bytes", "peak RSS (MiB)", 1 / 2**20, "{:.0f}"),
)


def table(summary: dict[str, Any]) -> str:
    """One markdown table: medians per arm, per-pair delta median and range."""
    lines = [
        f"`{summary['recipe']}` — {summary['pairs']} pairs, {summary['timed']}, "
        f"request {summary['request']}, threads {summary['threads']}",
        "",
        "| metric | serial | overlapped | Δ per pair (median) | Δ min … max |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for key, label, scale, fmt in ROWS:
        if key not in summary["serial"]:
            continue
        d = summary["delta"][key]
        cells = [
            fmt.format(summary["serial"][key]["median"] * scale),
            fmt.format(summary["overlapped"][key]["median"] * scale),
            fmt.format(d["median"] * scale),
            f"{fmt.format(min(d['per_pair']) * scale)} … {fmt.format(max(d['per_pair']) * scale)}",
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    serial = summary["serial"]["noise_critical_s"]["median"]
    overlapped = summary["overlapped"]["noise_critical_s"]["median"]
    if serial > 0:
        lines += ["", f"overlapped / serial noise on the request thread: {overlapped / serial:.1%}"]
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--replot"]:
        print(replot(Path(sys.argv[2]), sys.argv[3]))
        return
    for path in sys.argv[1:]:
        print(table(json.loads(Path(path).read_text())))
        print()


def replot(trace_dir: Path, recipe: str) -> Path:
    """Redraw `<recipe>-timeline.png` from the two Chrome traces a bench wrote."""
    from prenoise.observe.timeline_plot import plot_timelines
    from prenoise.observe.tracing import spans_from_chrome_trace

    arms = {
        arm: spans_from_chrome_trace(
            json.loads((trace_dir / f"{recipe}-{arm}.trace.json").read_text())
        )
        for arm in ("serial", "overlapped")
    }
    return plot_timelines(
        arms, trace_dir / f"{recipe}-timeline.png", title=f"{recipe}: last pair, threads as lanes"
    )


if __name__ == "__main__":
    main()
