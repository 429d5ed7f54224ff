"""Measure one real `prenoise generate` request's memory, stage by stage, in this process.

Run as a script in a fresh interpreter (one request per process, so nothing earlier hides its
peak): `python tests/ref2va/request_memory.py GENERATE-ARGS…` runs `prenoise generate
GENERATE-ARGS…` through the CLI's own code and prints one JSON object on its last line:

- `estimate`: the plan's `RequestEstimate` fields and `peak` (bytes), as the budget saw them;
- `start_rss`: the resident set when the plan was made (the budget's "available now" is read
  then, so a request's cost is what it adds to this);
- `stages`: per stage (`load models`, `prepare`, `denoise`, `decode`), the highest resident set
  during it minus `start_rss`, from the kernel's high-water mark (`VmHWM`, reset at each stage
  boundary through `/proc/self/clear_refs`), which sees every allocation torch makes;
- `peak`: the largest of them.

Linux only (`/proc/self/status`, `clear_refs`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_high_water() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # "5": reset the peak RSS (VmHWM)


class _Segments:
    """Peak resident growth per labelled segment: every entry to or exit from a wrapped function
    ends the current segment (its `VmHWM` minus `start_rss` is credited to its label) and resets
    the high-water mark. Labels nest: `decode/decode_group` is a group's decode, `decode` the
    rest of the decode stage (the writer's encoding between groups, the muxer)."""

    def __init__(self) -> None:
        self.start_rss = 0
        self.labels: list[str] = []
        self.peaks: dict[str, int] = {}
        self.sequence: list[tuple[str, int]] = []

    def begin(self) -> None:
        _reset_high_water()
        self.start_rss = _status_kib("VmRSS") << 10
        self.labels = []

    def _mark(self) -> None:
        if self.start_rss:
            label = "/".join(self.labels) or "between stages"
            grown = (_status_kib("VmHWM") << 10) - self.start_rss
            self.peaks[label] = max(self.peaks.get(label, grown), grown)
            self.sequence.append((label, grown))
        _reset_high_water()

    def wrap(self, label: str, function: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            self._mark()
            self.labels.append(label)
            try:
                return function(*args, **kwargs)
            finally:
                self._mark()
                self.labels.pop()

        return run


def main(argv: list[str]) -> int:
    from prenoise.cli import commands
    from prenoise.ref2va import audio_vae, cli_options, pipeline, request_plan, video_vae
    from prenoise.ref2va.media import writing

    segments = _Segments()
    record: dict[str, Any] = {}
    real_plan = request_plan.plan_request

    def plan_request(recipe: Any, *args: Any, **kwargs: Any) -> Any:
        plan = real_plan(recipe, *args, **kwargs)
        estimate = plan.estimate
        fields = ("model", "noise", "references", "denoise", "decode")
        record["estimate"] = {name: getattr(estimate, name) for name in fields}
        record["estimate"]["peak"] = estimate.peak
        segments.begin()
        return plan

    request_plan.plan_request = plan_request
    wrap = segments.wrap
    cli_options.load_models = wrap("load models", cli_options.load_models)
    cls = pipeline.Ref2VAPipeline
    cls.prepare = wrap("prepare", cls.prepare)  # type: ignore[method-assign]
    cls.prepare_next = wrap("prepare", cls.prepare_next)  # type: ignore[method-assign]
    cls.denoise = wrap("denoise", cls.denoise)  # type: ignore[method-assign]
    cls.decode_and_write = wrap("decode", cls.decode_and_write)  # type: ignore[method-assign]
    pipeline.encode_conditioning = wrap("encode", pipeline.encode_conditioning)
    pipeline.unpatchify = wrap("unpatchify", pipeline.unpatchify)
    audio_vae.AudioVAE.decode = wrap("audio", audio_vae.AudioVAE.decode)  # type: ignore[method-assign]
    video_vae.VideoVAE.decode_group = wrap("group", video_vae.VideoVAE.decode_group)  # type: ignore[method-assign]
    writing._encode_audio = wrap("encode audio", writing._encode_audio)
    status = commands.main(["generate", "--quiet", *argv])
    stages: dict[str, int] = {}
    for label, grown in segments.peaks.items():
        top = label.split("/", 1)[0]
        stages[top] = max(stages.get(top, grown), grown)
    record.update(
        status=status,
        start_rss=segments.start_rss,
        segments=segments.peaks,
        sequence=segments.sequence,
        stages=stages,
        peak=max(stages.values(), default=0),
    )
    print(json.dumps(record))
    return 0 if status == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
