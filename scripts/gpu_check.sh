#!/usr/bin/env bash
# Check prenoise on a machine with one CUDA GPU; results and report.md go to OUTDIR.
#
#   scripts/gpu_check.sh OUTDIR          # from the repository root; OUTDIR absent or empty
#   PYTHON=/opt/py/bin/python scripts/gpu_check.sh OUTDIR
#
# Python: PYTHON when set, else python3 when it imports torch, else the checkout's
# .venv/bin/python when present (said on stderr); without any, "no torch" naming PYTHON (exit 2).
#
# It installs prenoise (C kernel included) into a throwaway directory with the machine's own
# Python and torch, without the network and without touching that Python's environment, then
# runs the exact-mix check, `prenoise verify` on two recipes and `prenoise bench`, each under its
# own time limit (about 8 minutes in all). Exit status: 0 every required check passed, 1 some did
# not, 2 refused before any work (one line on stderr). benchmarks/README.md, "Running on a GPU".
#
# This wrapper only checks its argument and finds Python; scripts/gpu_check.py does the rest.
# PRENOISE_GPU_CHECK_DEVICE=cpu and PRENOISE_GPU_CHECK_TINY=1 run the same steps on the CPU with
# small inputs: how tests/test_gpu_check.py exercises the script on a machine without a GPU.
set -euo pipefail

refuse() {
    echo "gpu_check.sh: $1" >&2
    exit 2
}

if [ "$#" -ne 1 ] || [ -z "$1" ]; then
    refuse "usage: scripts/gpu_check.sh OUTDIR (OUTDIR must not exist or be empty)"
fi

# The driver sits next to this script, wherever it is called from.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The machine's own Python with its CUDA torch: PYTHON when set; else python3 when it imports
# torch; else this checkout's .venv/bin/python (`make setup`) when present, said in one line.
venv_python="$here/../.venv/bin/python"
if [ -n "${PYTHON:-}" ]; then
    python="$PYTHON"
elif command -v python3 >/dev/null 2>&1 && python3 -c "import torch" >/dev/null 2>&1; then
    python=python3
elif [ -x "$venv_python" ]; then
    python="$(cd "$here/.." && pwd)/.venv/bin/python"
    echo "gpu_check.sh: python3 has no torch: using $python (set PYTHON to choose another)" >&2
else
    python=python3  # refused below or by the driver: "no torch", naming PYTHON
fi
if ! command -v "$python" >/dev/null 2>&1; then
    refuse "no python: '$python' not found (set PYTHON to a python with torch)"
fi

exec "$python" "$here/gpu_check.py" "$1"
