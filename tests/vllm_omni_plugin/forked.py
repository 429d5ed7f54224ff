"""Processes forked from one server that imported torch and vllm once (`vllm_forkserver`).

A fresh interpreter spends most of its start importing torch and vllm (most of a scratch-copy run
or a rank here); the `vllm_forkserver` fixture (conftest.py) gives a multiprocessing context whose
server imports them once per session (`PRELOAD`), and each process is forked from it: what it then
imports (vllm-omni, prenoise) it imports itself, as a fresh interpreter would. Nothing of
vllm-omni is imported in the server (each process checks), so a process can still put a scratch
copy of `vllm_omni` first on its path.

This module imports no prenoise and no vllm-omni: a forked process unpickles its target from here.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

from waits import READY_CEILING_S

PRELOAD = (
    "torch",
    "vllm",
    "vllm.config",
    "vllm.inputs",
    "vllm.model_executor.layers.rotary_embedding",
    "vllm.v1.engine",
    "vllm.v1.request",
)
"""What the server imports: vllm, then the vllm modules `vllm_omni.patch` imports first (0.30.0
to 0.32.0rc1), in its order, before any vllm-omni code but its version: what `import vllm_omni`
imports first anyway. A module a release lacks is left out (multiprocessing skips an
ImportError)."""


def _not_imported_yet(*prefixes: str) -> None:
    """No module of `prefixes` is imported yet (the server imported none)."""
    early = [name for name in sys.modules if name.startswith(prefixes)]
    if early:
        raise RuntimeError(f"imported in the fork server: {early[:5]}")


def run_script(
    code: str, argv: list[str], environ: dict[str, str], path: list[str], out: str, err: str
) -> None:
    """`python -c CODE ARGV...` in this forked process, as that interpreter would run it: the
    environment `environ`, `sys.path` `path`, stdout and stderr to the files `out` and `err`."""
    for fd, name in ((1, out), (2, err)):
        handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    # imported here, from `path` (prenoise's integration reads which vllm-omni is installed)
    _not_imported_yet("vllm_omni", "prenoise.integrations.vllm_omni")
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:] = path
    importlib.invalidate_caches()
    sys.argv = ["-c", *argv]
    try:
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def run(
    context: ForkServerContext, code: str, argv: list[str], environ: dict[str, str], tmp: Path
) -> subprocess.CompletedProcess[str]:
    """What `subprocess.run([sys.executable, "-c", code, *argv], env=environ,
    capture_output=True, text=True)` gives, the process forked from the server; its `sys.path`
    is the one that interpreter would have (asked of a bare interpreter with `environ`)."""
    probe = "import json, sys; print(json.dumps(sys.path))"
    asked = subprocess.run(
        [sys.executable, "-c", probe],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
        timeout=READY_CEILING_S,
    )
    path: list[str] = json.loads(asked.stdout)
    out, err = tmp / "forked.stdout", tmp / "forked.stderr"
    process = context.Process(
        target=run_script, args=(code, argv, environ, path, str(out), str(err)), name="forked-run"
    )
    process.start()
    process.join(READY_CEILING_S)  # returns as soon as it exits
    if process.is_alive():
        process.kill()
        process.join()
        raise AssertionError(f"the forked run hung for {READY_CEILING_S} s: {err.read_text()}")
    code_ = process.exitcode
    assert code_ is not None
    return subprocess.CompletedProcess(
        ["<forked>", "-c", "...", *argv], code_, out.read_text(), err.read_text()
    )


def in_environ(rank: int, environ: dict[str, str], fn: Callable[..., None], *args: Any) -> None:
    """`fn(rank, *args)` with the environment `environ` (a rank started by
    `torch.multiprocessing.start_processes`: the environment its spawned process would have had;
    a forked one has the server's)."""
    _not_imported_yet("vllm_omni")
    os.environ.clear()
    os.environ.update(environ)
    fn(rank, *args)
