"""Print docs/diffusers.md's table of diffusers' video and audio pipeline classes and what
prenoise does for each, read from the installed diffusers' source (run it in `.venv`: diffusers
0.42.1).

    .venv/bin/python scripts/diffusers_video_table.py > /tmp/table.md

For every pipeline class of a video/audio package (`VIDEO_AUDIO_PACKAGES`):
- initial: prenoise has a plan for the class (`registry.supported()`), else the call is plain;
- per-step: the class hands the caller's generator to `scheduler.step` (it builds
  `prepare_extra_step_kwargs(generator, ...)` or passes `generator=` to `step`), so a stochastic
  scheduler's draws are on the request's generator — prepared ahead where the class has a plan
  and the scheduler is in `step_noise.STEP_DRAWS`, drawn plainly otherwise; "global RNG" where
  `step` is called without it (a stochastic scheduler there draws from the global RNG);
- streams: `enable(pipe, stream=...)` draws every `randn_tensor` call of any class in the stream
  (on the plain path too); "own torch draws" lists the class module's direct `torch.randn` /
  `randn_like` / `torch.rand` / `.normal_` calls, which are not in the stream (`raw_draws.py`
  covers LTX image-to-video's decode noise only).
The classification reads source text: it is a checklist for review, not a proof.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys

VIDEO_AUDIO_PACKAGES = (
    "allegro",
    "animatediff",
    "anyflow",
    "audioldm2",
    "chronoedit",
    "cogvideo",
    "consisid",
    "cosmos",
    "easyanimate",
    "helios",
    "hunyuan_video",
    "hunyuan_video1_5",
    "kandinsky5",
    "kandinsky6",
    "latte",
    "longcat_audio_dit",
    "ltx",
    "ltx2",
    "lucy",
    "mochi",
    "motif_video",
    "sana_video",
    "skyreels_v2",
    "stable_audio",
    "stable_audio_3",
    "stable_video_diffusion",
    "wan",
)
_GENERATOR_TO_STEP = re.compile(
    r"prepare_extra_step_kwargs\(\s*generator|scheduler\.step\([^)]*generator\s*=", re.S
)
_STEP = re.compile(r"scheduler\.step\(")
_OWN_DRAW = re.compile(
    r"torch\.randn\(|torch\.randn_like\(|torch\.rand\(|\.normal_\(|torch\.normal\("
)


def rows() -> list[tuple[str, str, str, str, str]]:
    import diffusers.pipelines as pipelines
    from diffusers import DiffusionPipeline

    from prenoise.integrations.diffusers import supported
    from prenoise.integrations.diffusers.raw_draws import windows

    planned = set(supported())
    raw_covered = set(windows())
    out = []
    for package in VIDEO_AUDIO_PACKAGES:
        try:
            pkg = importlib.import_module(f"diffusers.pipelines.{package}")
        except ImportError as error:
            print(f"skipped {package}: {error}", file=sys.stderr)
            continue
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("pipeline_") or info.name == "pipeline_output":
                continue
            name = f"{pkg.__name__}.{info.name}"
            try:
                module = importlib.import_module(name)
            except Exception as error:  # an optional dependency missing
                print(f"skipped {name}: {error!r}", file=sys.stderr)
                continue
            source = inspect.getsource(module)
            for cls_name, cls in vars(module).items():
                if not (
                    isinstance(cls, type)
                    and issubclass(cls, DiffusionPipeline)
                    and cls.__module__ == name
                ):
                    continue
                path = f"{name}.{cls_name}"
                initial = "planned" if path in planned else _no_plan(cls_name)
                if _GENERATOR_TO_STEP.search(source):
                    per_step = (
                        "generator: ahead with a `STEP_DRAWS` scheduler"
                        if path in planned
                        else "generator (plain)"
                    )
                elif _STEP.search(source):
                    per_step = "global RNG"
                else:
                    per_step = "—"
                own = sorted({m.group(0).rstrip("(") for m in _OWN_DRAW.finditer(source)})
                streams = "randn_tensor" + (f"; not: {', '.join(own)}" if own else "")
                if own and path in raw_covered:
                    streams = f"randn_tensor; {', '.join(own)} (`raw_draws.py`)"
                out.append((package, cls_name, initial, per_step, streams))
    del pipelines
    return sorted(out)


WHY_NO_PLAN = {
    "EasyAnimateControlPipeline": (
        "its `__call__` passes `text_encoder_index` to `encode_prompt`, which has no such "
        "argument: every call raises `TypeError` (0.40.0-0.42.1)"
    ),
}
"""Why a class examined for a plan has none (the others were not examined yet)."""


def _no_plan(cls_name: str) -> str:
    why = WHY_NO_PLAN.get(cls_name)
    return "plain call (no plan)" if why is None else f"plain call (no plan: {why})"


def main() -> None:
    print("| package | class | initial noise | per-step noise | in a named stream |")
    print("| --- | --- | --- | --- | --- |")
    for package, cls, initial, per_step, streams in rows():
        print(f"| {package} | `{cls}` | {initial} | {per_step} | {streams} |")


if __name__ == "__main__":
    main()
