"""Regenerate src/prenoise/noise/stream_goldens.json from real torch (on an x86 AVX2/AVX-512 host).

    .venv/bin/python scripts/stream_goldens.py           # rewrite the goldens
    .venv/bin/python scripts/stream_goldens.py --check   # exit 1 if they differ from torch here

The x86 stream is what this machine's torch draws with its AVX2 kernel; the libm stream is what
the same torch draws with ``ATEN_CPU_CAPABILITY=default`` (its scalar libm kernel, which is
aarch64 torch's stream). Each is computed in a fresh subprocess that checks which capability torch
dispatched to. A case draws its counts one after another on ``Generator().manual_seed(seed)``;
``sha256`` is over the concatenated raw little-endian bytes of the values, ``state_sha256`` over
``get_state()`` afterwards (which every stream must leave identical).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

GOLDENS = Path(__file__).resolve().parents[1] / "src" / "prenoise" / "noise" / "stream_goldens.json"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}
CAPABILITY = {"x86": ("AVX2", "AVX512"), "libm": ("DEFAULT",)}


def cases() -> list[dict[str, object]]:
    """Several seeds, ragged and large sizes, every dtype, a multi-draw sequence; last, a
    sequence through torch's scalar path (numel < 16), which prenoise leaves to torch."""
    out: list[dict[str, object]] = []
    for dtype in DTYPES:
        for seed in (0, 1, 42, 123456789):
            for count in (16, 17, 1000, 65541):
                out.append({"seed": seed, "dtype": dtype, "counts": [count]})
        for seed in (42, 123456789):  # > 1M elements: the kernel's two-thread split
            out.append({"seed": seed, "dtype": dtype, "counts": [1000003]})
        out.append({"seed": 7, "dtype": dtype, "counts": [1000, 17, 33, 4096, 16]})
    out.append({"seed": 3, "dtype": "float32", "counts": [5, 1000, 15, 3, 64], "scalar": True})
    return out


def draw_bytes(seed: int, dtype: str, counts: list[int]) -> tuple[bytes, bytes]:
    """Plain torch: the raw bytes of the draws and the final generator state."""
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(n, generator=g, dtype=DTYPES[dtype]) for n in counts]
    raw = b"".join(p.view(torch.uint8).numpy().tobytes() for p in parts)
    return raw, g.get_state().numpy().tobytes()


def emit(stream: str) -> None:
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in CAPABILITY[stream]:
        sys.exit(f"stream {stream!r} needs torch capability {CAPABILITY[stream]}, got {capability}")
    result = []
    for case in cases():
        raw, state = draw_bytes(int(case["seed"]), str(case["dtype"]), list(case["counts"]))
        result.append(
            {
                **case,
                "sha256": hashlib.sha256(raw).hexdigest(),
                "state_sha256": hashlib.sha256(state).hexdigest(),
            }
        )
    json.dump({"capability": capability, "cases": result}, sys.stdout)


def generate() -> dict[str, object]:
    streams: dict[str, object] = {}
    for stream in CAPABILITY:
        env = dict(os.environ)
        env.pop("ATEN_CPU_CAPABILITY", None)
        if stream == "libm":
            env["ATEN_CPU_CAPABILITY"] = "default"
        out = subprocess.run(
            [sys.executable, __file__, "--emit", stream],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        streams[stream] = json.loads(out)
    states = {
        s: [c["state_sha256"] for c in v["cases"]]  # type: ignore[index]
        for s, v in streams.items()
    }
    if states["x86"] != states["libm"]:
        sys.exit("generator states differ between the streams: torch changed, goldens not written")
    return {"torch_version": torch.__version__.split("+")[0], "streams": streams}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--emit", choices=sorted(CAPABILITY), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.emit:
        emit(args.emit)
        return
    goldens = generate()
    text = json.dumps(goldens, indent=1, sort_keys=True) + "\n"
    if args.check:
        same = GOLDENS.exists() and json.loads(GOLDENS.read_text()) == goldens
        print("goldens match torch here" if same else "goldens DIFFER from torch here")
        sys.exit(0 if same else 1)
    GOLDENS.write_text(text)
    print(f"wrote {GOLDENS}")


if __name__ == "__main__":
    main()
