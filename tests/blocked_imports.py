"""Run Python in a subprocess where some modules cannot be imported, as on a smaller install.

A `sitecustomize` on `PYTHONPATH` sets each blocked top-level module to None in `sys.modules`:
importing it (or a submodule) raises `ModuleNotFoundError` naming it, and
`importlib.util.find_spec` says it is absent, as when the package is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from waits import READY_CEILING_S

#: Every third-party module an extra of pyproject.toml provides (and test-only ones): what the
#: base install (`pip install prenoise`: torch, numpy, pydantic, pyyaml, rich) lacks.
OPTIONAL_MODULES = (
    "av",
    "PIL",
    "transformers",
    "safetensors",
    "sentencepiece",
    "matplotlib",
    "psutil",
    "diffusers",
    "fastapi",
    "starlette",
    "uvicorn",
    "prometheus_client",
    "multipart",
    "python_multipart",
    "httpx",
    "vllm",
    "vllm_omni",
    "torchsde",
    "tokenizers",
    "huggingface_hub",
)

_SITECUSTOMIZE = """
import sys

# None in sys.modules: `import name` raises ModuleNotFoundError and importlib.util.find_spec
# returns None, as for a package that is not installed (probes like diffusers' see it missing).
for name in {blocked!r}:
    sys.modules[name] = None
"""

REPO = Path(__file__).resolve().parents[1]


def run_python(
    args: Sequence[str],
    blocked: Iterable[str],
    scratch: Path,
    *,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python ARGS` (from the repository root) with `blocked` modules unimportable."""
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(blocked=sorted(set(blocked))))
    path = [str(scratch), *filter(None, [os.environ.get("PYTHONPATH")])]
    full_env = {k: v for k, v in os.environ.items() if k != "PRENOISE_DEBUG"}
    # COLUMNS: rich wraps at the terminal width; one-line messages must stay on one line.
    full_env.update(PYTHONPATH=os.pathsep.join(path), COLUMNS="200", **(env or {}))
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=False,
    )
