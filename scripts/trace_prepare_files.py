"""Which prenoise source files one Ref2VA request's preparation walks through, and how often.

Usage: `python scripts/trace_prepare_files.py [--recipe PATH] [--arm serial|overlapped]
[--sequence]`. Loads the recipe (default: the shipped demo, tiny models on the CPU), builds its
models, prepares the reference media once untraced (writing the synthetic files is not part of
a request), then traces one request on the calling thread, from its recipe to denoise-ready
inputs (`plan_request`, then `Ref2VAPipeline.prepare`), and prints, for two walks:

- `distinct files`: how many prenoise source files were entered;
- `returns`: how many visits went back to a file the walk had already left;
- each file's visit count (most visited first); with `--sequence`, the visits in order.

A visit is a maximal run of consecutive calls into functions of the same prenoise file (calls
into other packages, torch or pydantic, neither start nor end a run), recorded with
`sys.setprofile` on the calling thread only: the preparation's workers are not followed.
So `returns = visits - distinct files`. The `every call` walk counts every call; the `each
function once` walk counts only each function's first call, as one reads the code (a function
called again, per decoded frame or from another caller, adds no visit). The run happens in a
temporary working directory.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import prenoise

PACKAGE_ROOT = Path(prenoise.__file__).resolve().parent
DEMO_RECIPE = PACKAGE_ROOT / "recipes" / "ref2va-demo.yaml"


@dataclass(frozen=True)
class FileVisits:
    """The prenoise files one traced call entered, in order (consecutive calls in one file
    collapsed into one visit), with paths relative to the `prenoise` package."""

    sequence: tuple[str, ...]

    @property
    def distinct(self) -> int:
        """How many different files were visited."""
        return len(set(self.sequence))

    @property
    def returns(self) -> int:
        """Visits to a file the walk had already left: all visits minus the first of each."""
        return len(self.sequence) - self.distinct

    def per_file(self) -> list[tuple[str, int]]:
        """`(file, visits)`, most visited first, ties by name."""
        return sorted(Counter(self.sequence).items(), key=lambda item: (-item[1], item[0]))


@dataclass(frozen=True)
class TracedWalk:
    """The files one traced call entered: counting every call, and each function's first."""

    every_call: FileVisits
    each_function_once: FileVisits


def trace_files(call: Callable[[], Any]) -> tuple[Any, TracedWalk]:
    """Run `call()` on this thread under `sys.setprofile` and return its result and the prenoise
    files its Python calls entered (see `FileVisits`). The previous profiler is restored."""
    every: list[str] = []
    once: list[str] = []
    seen: set[CodeType] = set()
    root = str(PACKAGE_ROOT) + os.sep
    names: dict[str, str | None] = {}  # co_filename -> package-relative name (None: not ours)

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        name = names.get(code.co_filename, "")
        if name == "":
            filename = code.co_filename
            resolved = str(Path(filename).resolve()) if filename.endswith(".py") else ""
            name = resolved[len(root) :] if resolved.startswith(root) else None
            names[filename] = name
        if name is None:
            return
        _visit(every, name)
        if code not in seen:
            seen.add(code)
            _visit(once, name)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(previous)
    return result, TracedWalk(FileVisits(tuple(every)), FileVisits(tuple(once)))


def _visit(sequence: list[str], name: str) -> None:
    if not sequence or sequence[-1] != name:
        sequence.append(name)


def trace_demo_prepare(recipe_path: Path = DEMO_RECIPE, arm: str = "overlapped") -> TracedWalk:
    """Trace one request of `recipe_path` from its recipe to denoise-ready inputs
    (`plan_request`, then `Ref2VAPipeline.prepare` of that plan) in a temporary working
    directory; models are built and synthetic references written untraced."""
    from prenoise.ref2va.config import load_recipe
    from prenoise.ref2va.models import Ref2VAModels
    from prenoise.ref2va.pipeline import Ref2VAPipeline
    from prenoise.ref2va.references import ensure_reference
    from prenoise.ref2va.request_plan import plan_request

    previous = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="prenoise-trace-") as tmp:
        os.chdir(tmp)
        try:
            recipe = load_recipe(recipe_path)
            for spec in recipe.references:  # the synthetic media, written before the request
                ensure_reference(spec)
            pipeline = Ref2VAPipeline(Ref2VAModels.default(recipe.model), device="cpu")
            _, visits = trace_files(
                lambda: pipeline.prepare(plan_request(recipe), arm)  # type: ignore[arg-type]
            )
        finally:
            os.chdir(previous)
    return visits


def main(argv: list[str] | None = None) -> int:
    """Print the file-visit counts of one traced preparation (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", type=Path, default=DEMO_RECIPE)
    parser.add_argument("--arm", choices=("serial", "overlapped"), default="overlapped")
    parser.add_argument("--sequence", action="store_true", help="also print every visit")
    args = parser.parse_args(argv)
    walk = trace_demo_prepare(args.recipe, args.arm)
    for title, visits in (
        ("every call", walk.every_call),
        ("each function once", walk.each_function_once),
    ):
        print(f"{title}: distinct files {visits.distinct}, returns {visits.returns}")
        for name, count in visits.per_file():
            print(f"{count:6d}  {name}")
        if args.sequence:
            print("sequence: " + " -> ".join(visits.sequence))
    return 0


if __name__ == "__main__":
    sys.exit(main())
