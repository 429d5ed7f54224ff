"""Test-suite settings: never reach a model hub."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
