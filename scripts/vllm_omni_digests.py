"""Print the reviewed-digest table entries of vLLM-Omni functions, per release, from the wheels.

    .venv/bin/python scripts/vllm_omni_digests.py \\
        'vllm_omni.diffusion.models.minimax_h3.pipeline_minimax_h3:MiniMaxH3Pipeline.forward' ...

With no key: every key of `src/prenoise/integrations/vllm_omni/reviewed.py`. For each
`module:qualname` it prints the line to paste into `reviewed.REVIEWED`:
`"key": {digest: (releases,)},`, the digests made exactly as the plugin makes them
(`digests.code_digest`; `ABSENT` where a release's module does not define it or the release has
no such module, as `digests.installed_digest` records it, said on stderr). The wheels of
`--release` (default: every release of `reviewed.RELEASES`) are read from `--wheels` (default
/tmp/prenoise-vllm-omni-wheels), fetched there with `pip download --no-deps` when missing; the
sources are read from the wheel, nothing is installed or imported from it. Two digests for one
key mean the code changed between releases: read the difference before recording both. Exit 2
when a key's module is missing from every release (a misspelt key).
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
from prenoise.integrations.vllm_omni.reviewed import ABSENT, RELEASES, REVIEWED

DEFAULT_WHEELS = Path("/tmp/prenoise-vllm-omni-wheels")


def digests_of(key: str, wheels: dict[str, Path]) -> tuple[dict[str, list[str]], list[str]]:
    """({digest: releases}, [releases whose wheel lacks `key`'s module])."""
    module, _, qualname = key.partition(":")
    seen: dict[str, list[str]] = {}
    missing = []
    for release, path in wheels.items():
        source = wheel_module_source(path, module)
        if source is None:
            missing.append(release)
            digest = ABSENT
        else:
            try:
                digest = code_digest(source, qualname)
            except CodeUnavailable:
                digest = ABSENT
        seen.setdefault(digest, []).append(release)
    return seen, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("keys", nargs="*", help="module:qualname (default: every reviewed key)")
    parser.add_argument("--release", action="append", help="a vllm-omni release (repeatable)")
    parser.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="the wheel folder")
    args = parser.parse_args(argv)
    releases = args.release or list(RELEASES)
    wheels = {release: release_wheel("vllm-omni", release, args.wheels) for release in releases}
    status = 0
    for key in args.keys or list(REVIEWED):
        seen, missing = digests_of(key, wheels)
        table = ", ".join(f'"{d}": {tuple(r)!r}' for d, r in seen.items())
        print(f'"{key}": {{{table}}},')
        if missing:
            print(f"# {key}: module missing in {', '.join(missing)}", file=sys.stderr)
            if len(missing) == len(wheels):
                status = 2
    return status


if __name__ == "__main__":
    raise SystemExit(main())
