"""SGLang 0.5.23's real MiniMax-H3 stages on the CPU, no checkpoint (`make pytest-sglang`).

Skipped where sglang is not installed (the main venv). Every sglang import costs ~15-45 s, so
the whole package is imported once per session (`h3`), and the plugin is loaded the way SGLang's
workers load it: `load_plugins(); apply_plugin_hooks()` (the real entry point).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("sglang")


@pytest.fixture(scope="session")
def h3() -> Any:
    """Upstream's modules, the server args, and the plugin loaded by SGLang's own loader."""
    from prenoise.integrations.sglang.harness import load_h3

    namespace = load_h3()
    yield namespace
    namespace.server_args_module.set_global_server_args(namespace.previous_server_args)
