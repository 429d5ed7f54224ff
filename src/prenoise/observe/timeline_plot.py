"""PNG timelines of request spans: one panel per arm, one lane per thread (matplotlib)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prenoise.guards.atomic import write_atomic
from prenoise.observe.tracing import Category, Span

if TYPE_CHECKING:  # matplotlib is the `bench` extra's
    from matplotlib.figure import Figure

__all__ = ["CAPTION", "CATEGORY_COLORS", "plot_timelines", "timeline_figure"]

CATEGORY_COLORS = {
    Category.ENCODE: "#4c72b0",
    Category.NOISE: "#c44e52",
    Category.WAIT: "#dd8452",
    Category.PREPARE: "#55a868",
    Category.MIX: "#8172b3",
    Category.INPUTS: "#937860",
    Category.DENOISE: "#64b5cd",
    Category.DECODE: "#8c8c8c",
}


CAPTION = (
    "One panel per arm of the same request, one lane per thread (top: the request thread; "
    "below: preparation workers). Bars are measured spans: encode = text and media encoders; "
    "noise = draws on the thread that needs them; prepare = draws on a preparation worker; "
    "wait = the request thread blocked on prepared noise; mix = condition mixing; inputs = "
    "denoise inputs; then denoise and decode. The outlined box is the whole request. Both arms "
    "prepare bitwise-identical inputs; the overlapped arm draws during encoding."
)


TITLE_IN = 0.35
"""Inches at the top of the figure for the title's row; the legend's row is under it."""
LEGEND_IN = 0.35
"""Inches for the legend's row, between the title and the first panel (neither covers the
other, whatever the title's length)."""


def plot_timelines(
    arms: Mapping[str, Sequence[Span]], path: Path, *, title: str = "", caption: str = CAPTION
) -> Path:
    """Draw each arm's spans (x: seconds from that arm's first span; y: thread lanes).

    REQUEST spans are drawn as a thin outline behind the request thread's lane; `caption` is
    printed under the panels so the PNG explains itself. Writes a PNG.
    """
    import matplotlib.pyplot as plt

    fig = timeline_figure(arms, title=title, caption=caption)
    try:
        write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    finally:
        plt.close(fig)
    return path


def timeline_figure(
    arms: Mapping[str, Sequence[Span]], *, title: str = "", caption: str = CAPTION
) -> Figure:
    """The figure `plot_timelines` writes: the title on the top row, the legend on the row
    under it, then one panel per arm and the caption. The caller closes it."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    caption_lines = textwrap.wrap(caption, 150) if caption else []
    caption_in = 0.18 * len(caption_lines)
    fig, axes = plt.subplots(
        len(arms), 1, figsize=(12, 1.6 + 1.3 * len(arms) + caption_in), squeeze=False
    )
    horizon = max(
        (
            max(s.end_s for s in spans) - min(s.start_s for s in spans)
            for spans in arms.values()
            if spans
        ),
        default=1.0,
    )
    for ax, (arm, spans) in zip(axes[:, 0], arms.items(), strict=True):
        origin = min((s.start_s for s in spans), default=0.0)
        lanes: dict[int, str] = {}  # threads in order of their first span: the request on top
        for s in sorted(spans, key=lambda s: s.start_s):
            lanes.setdefault(s.thread_id, s.thread_name)
        order = {tid: i for i, tid in enumerate(lanes)}
        for s in sorted(spans, key=lambda s: -s.duration_s):  # nested (shorter) spans on top
            y = order[s.thread_id]
            start, width = s.start_s - origin, s.duration_s
            if s.category == Category.REQUEST:
                ax.broken_barh(
                    [(start, width)],
                    (y - 0.45, 0.9),
                    facecolors="none",
                    edgecolors="black",
                    linewidth=0.8,
                )
                continue
            ax.broken_barh(
                [(start, width)],
                (y - 0.35, 0.7),
                facecolors=CATEGORY_COLORS.get(s.category, "#cccccc"),
            )
        ax.set_yticks(range(len(lanes)), list(lanes.values()))
        ax.set_xlim(0, horizon * 1.02)
        ax.set_ylim(-0.6, len(lanes) - 0.4)
        ax.invert_yaxis()
        ax.set_title(arm, loc="left", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since request start")
    height = fig.get_figheight()
    title_top = 1 - 0.05 / height
    legend_top = 1 - TITLE_IN / height  # the legend's row starts under the title's
    handles = [Patch(color=c, label=k) for k, c in CATEGORY_COLORS.items()]
    fig.legend(
        handles=handles,
        loc="upper right",
        bbox_to_anchor=(0.99, legend_top),
        ncols=len(handles),
        fontsize=8,
        frameon=False,
    )
    if title:
        fig.suptitle(title, x=0.01, y=title_top, ha="left", va="top", fontsize=11)
    bottom = caption_in / height
    if caption_lines:
        fig.text(0.01, 0.01, "\n".join(caption_lines), ha="left", va="bottom", fontsize=8)
    fig.tight_layout(rect=(0, bottom + 0.01, 1, 1 - (TITLE_IN + LEGEND_IN) / height))
    return fig
