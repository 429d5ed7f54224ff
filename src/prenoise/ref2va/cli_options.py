"""Request options shared by `prenoise generate`, `verify` and `bench` (recipe + overrides)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prenoise.guards.usage import (
    check_output_dir,
    check_output_file,
    check_outputs_are_not_inputs,
    missing_directory,
)
from prenoise.ref2va.catalog import resolve_recipe
from prenoise.ref2va.config import Recipe, RecipeError, load_recipe, recipe_from_dict
from prenoise.ref2va.limits import add_limit_arguments, limit_overrides

if TYPE_CHECKING:  # the models need the `ref2va` extra; `--help` must not
    from prenoise.ref2va.models import Ref2VAModels

__all__ = [
    "add_request_arguments",
    "check_request_outputs",
    "generate_out_path",
    "load_models",
    "recipe_from_args",
    "reference_kind",
    "with_limit_overrides",
]

_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".bmp"}
_AUDIO_SUFFIXES = {".wav", ".mp3", ".flac", ".ogg", ".m4a", ".aac"}


def reference_kind(path: Path) -> str:
    """`image`, `audio` or `video`, from the file suffix."""
    suffix = path.suffix.lower()
    if suffix in _IMAGE_SUFFIXES:
        return "image"
    if suffix in _AUDIO_SUFFIXES:
        return "audio"
    return "video"


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """`--recipe` plus the per-request overrides."""
    parser.add_argument(
        "--recipe",
        required=True,
        type=resolve_recipe,
        help="YAML recipe: a file, or a shipped recipe's name (prenoise recipes lists them)",
    )
    parser.add_argument("--prompt", help="the text prompt (default: the recipe's prompt)")
    parser.add_argument(
        "--reference",
        action="append",
        type=Path,
        metavar="PATH",
        help="image, video or audio reference (repeatable); replaces the recipe's references "
        "(default: the recipe's)",
    )
    parser.add_argument(
        "--seed", type=int, help="noise seed; output i uses seed + i (default: the recipe's seed)"
    )
    parser.add_argument(
        "--noise-stream",
        choices=("native", "x86", "libm"),
        help="noise arithmetic: native (local torch), or x86/libm: the same noise on every "
        "machine (opt-in; default: the recipe's noise_stream, native unless it says otherwise)",
    )
    parser.add_argument(
        "--duration", type=float, help="seconds, replaces frames (default: the recipe's)"
    )
    parser.add_argument(
        "--frames", type=int, help="frames, replaces duration (default: the recipe's)"
    )
    parser.add_argument(
        "--width",
        type=int,
        help="output width in pixels, with --height (default: the recipe's width or short_edge)",
    )
    parser.add_argument(
        "--height",
        type=int,
        help="output height in pixels, with --width (default: the recipe's height or short_edge)",
    )
    parser.add_argument("--steps", type=int, help="denoising steps (default: the recipe's)")
    parser.add_argument(
        "--shift-video",
        type=float,
        help="the video sampler's timestep shift (default: the recipe's shift_video)",
    )
    parser.add_argument(
        "--shift-audio",
        type=float,
        help="the audio sampler's timestep shift (default: the recipe's shift_audio)",
    )
    parser.add_argument(
        "--outputs",
        type=int,
        help="outputs per request, seeds seed .. seed + outputs - 1 (default: the recipe's)",
    )
    parser.add_argument("--device", help="cpu or cuda (default: the recipe's device, cpu)")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="directory with safetensors + config (default: the recipe's checkpoint, else "
        "seeded random weights)",
    )
    add_limit_arguments(parser)


def recipe_from_args(args: argparse.Namespace) -> Recipe:
    """Load the recipe and apply the overrides. A validation error names the key and the file,
    or, where an option's value is what fails (`--device cuda` on a host without CUDA, `--seed
    -1`), that option and its value instead (`RecipeError`: one line, exit status 2)."""
    groups: list[tuple[str, dict[str, Any]]] = []  # (the option as given, the keys it sets)
    for key in (
        "prompt",
        "seed",
        "noise_stream",
        "steps",
        "shift_video",
        "shift_audio",
        "outputs",
        "device",
    ):
        value = getattr(args, key, None)
        if value is not None:
            option = "--" + key.replace("_", "-")
            groups.append((option if key == "prompt" else f"{option} {value}", {key: value}))
    if args.checkpoint is not None:
        groups.append((f"--checkpoint {args.checkpoint}", {"checkpoint": args.checkpoint}))
    if args.duration is not None:
        groups.append((f"--duration {args.duration}", {"duration": args.duration, "frames": None}))
    if args.frames is not None:
        groups.append((f"--frames {args.frames}", {"frames": args.frames, "duration": None}))
    if args.width is not None or args.height is not None:
        given = [f"--{k} {getattr(args, k)}" for k in ("width", "height") if getattr(args, k)]
        size = {"width": args.width, "height": args.height, "short_edge": None}
        groups.append((" ".join(given) or "--width/--height", size))
    overrides = {key: value for _, values in groups for key, value in values.items()}
    if args.reference:  # an error in one names its index in `references` and the file
        overrides["references"] = [
            {"kind": reference_kind(p), "path": str(p)} for p in args.reference
        ]
    try:
        recipe = load_recipe(args.recipe, **overrides)
    except RecipeError as error:
        raise _blame_option(args.recipe, groups, overrides, error) from None
    return with_limit_overrides(recipe, args)


def _blame_option(
    path: str | Path,
    groups: list[tuple[str, dict[str, Any]]],
    overrides: dict[str, Any],
    error: RecipeError,
) -> RecipeError:
    """`error` (the recipe with every override applied failed) as the option that caused it:
    the first option of `groups` without which the recipe loads or fails otherwise; the file's
    own error when no option changes it. `overrides`: every override applied."""
    prefix = f"{Path(path)}: "
    message = str(error).removeprefix(prefix)
    for option, values in groups:
        rest = {key: value for key, value in overrides.items() if key not in values}
        try:
            load_recipe(path, **rest)
        except RecipeError as other:
            if str(other).removeprefix(prefix) == message:
                continue  # fails the same way without this option: not its fault
        return RecipeError(f"{option}: {message}")
    return error


def with_limit_overrides(recipe: Recipe, args: argparse.Namespace) -> Recipe:
    """`recipe` with the limit options given on the command line merged into its `limits`."""
    limits = limit_overrides(args)
    if not limits:
        return recipe
    data = recipe.model_dump()
    data["limits"] = {**data["limits"], **limits}
    return recipe_from_dict(data, "command line")


def load_models(recipe: Recipe) -> Ref2VAModels:
    """The recipe's models: from `checkpoint` when given (config must match), else embedded."""
    from prenoise.ref2va.models import Ref2VAModels

    if recipe.checkpoint is not None:
        return Ref2VAModels.from_checkpoint(recipe.checkpoint, recipe.model, device=recipe.device)
    return Ref2VAModels.default(recipe.model, device=recipe.device)


def generate_out_path(args: argparse.Namespace, recipe: Recipe) -> Path:
    """The first output MP4 of `prenoise generate`: `--out`, else `OUTPUT_DIR/NAME.mp4`."""
    return Path(args.out) if args.out else recipe.output_dir / f"{recipe.name}.mp4"


def check_request_outputs(args: argparse.Namespace, recipe: Recipe) -> list[tuple[str, Path]]:
    """Check every path a `generate`/`verify`/`bench` run will write (one process or torchrun):
    each output MP4 of `generate`, `--json` and `--trace-dir`. No output may be one of the
    run's inputs (the recipe, a reference, a checkpoint file) or another output.

    Returns `(option, directory)` for each missing directory the run will create
    (`prenoise.guards.usage.missing_directory`), for the command to say so when it has."""
    from prenoise.ref2va.pipeline import output_path

    outputs: list[tuple[str, Path]] = []
    missing: list[tuple[str, Path] | None] = []
    if args.command == "generate":
        out = generate_out_path(args, recipe)
        option = "--out" if args.out else "output_dir"
        for index in range(recipe.outputs):
            outputs.append((option, check_output_file(output_path(out, index), option)))
        missing.append(missing_directory(out, option))
    if getattr(args, "json", None):
        outputs.append(("--json", check_output_file(args.json, "--json")))
        missing.append(missing_directory(args.json, "--json"))
    if getattr(args, "trace_dir", None):
        check_output_dir(args.trace_dir, "--trace-dir")
        missing.append(missing_directory(args.trace_dir, "--trace-dir", is_dir=True))
    inputs = [("--recipe", Path(args.recipe))] if getattr(args, "recipe", None) else []
    inputs += [("reference", Path(spec.path)) for spec in recipe.references]
    if recipe.checkpoint is not None and Path(recipe.checkpoint).is_dir():
        inputs += [("checkpoint", p) for p in sorted(Path(recipe.checkpoint).iterdir())]
    check_outputs_are_not_inputs(outputs, inputs)
    return list(dict.fromkeys(entry for entry in missing if entry is not None))
