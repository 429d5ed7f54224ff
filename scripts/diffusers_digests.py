"""Print the reviewed-digest table entries of diffusers functions, per release, from the wheels.

    .venv/bin/python scripts/diffusers_digests.py \\
        'diffusers.modular_pipelines.wan.before_denoise:WanPrepareLatentsStep.__call__' ...

For each `module:qualname` (a function, a method, or a whole class) it prints the line to paste
into `src/prenoise/integrations/diffusers/reviewed.py` (classic pipelines) or
`reviewed_modular.py` (a modular plan's table): `"key": {digest: (releases,)},`, the digests made
exactly as the package makes them (`digests.code_digest`). The wheels of `--release` (default:
every release of `reviewed.RELEASES`) are read from `--wheels` (default
/tmp/prenoise-diffusers-wheels), fetched there with `pip download --no-deps` when missing; the
sources are read from the wheel, nothing is installed or imported from it. Two digests for one
key mean the code changed between releases: read the difference before recording both.
Exit 2 when a key is missing from a release (its line says which).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prenoise.guards.source_digests import (
    CodeUnavailable,
    code_digest,
    release_wheel,
    wheel_module_source,
)
from prenoise.integrations.diffusers.reviewed import RELEASES

DEFAULT_WHEELS = Path("/tmp/prenoise-diffusers-wheels")


def digests_of(key: str, wheels: dict[str, Path]) -> tuple[dict[str, list[str]], list[str]]:
    """({digest: releases}, [releases where `key` is missing])."""
    module, _, qualname = key.partition(":")
    seen: dict[str, list[str]] = {}
    missing = []
    for release, path in wheels.items():
        source = wheel_module_source(path, module)
        if source is None:
            missing.append(release)
            continue
        try:
            seen.setdefault(code_digest(source, qualname), []).append(release)
        except CodeUnavailable:
            missing.append(release)
    return seen, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("keys", nargs="+", help="module:qualname, e.g. diffusers.x.y:Cls.method")
    parser.add_argument("--release", action="append", help="a diffusers release (repeatable)")
    parser.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="wheel folder")
    args = parser.parse_args(argv)
    bad = [k for k in args.keys if k.count(":") != 1 or not all(k.split(":"))]
    if bad:
        parser.error(f"not module:qualname: {', '.join(bad)}")
    wheels = {r: release_wheel("diffusers", r, args.wheels) for r in (args.release or RELEASES)}
    status = 0
    for key in args.keys:
        seen, missing = digests_of(key, wheels)
        quoted = {d: ", ".join(f'"{r}"' for r in rs) for d, rs in seen.items()}
        table = ", ".join(f'"{d}": ({rs},)' for d, rs in quoted.items())
        print(
            f'"{key}": {{{table}}},' + (f"  # MISSING in {', '.join(missing)}" if missing else "")
        )
        status = 2 if missing else status
    return status


if __name__ == "__main__":
    sys.exit(main())
