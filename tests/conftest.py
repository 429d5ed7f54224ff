"""Test-suite settings: never reach a model hub. Fixture `overlap`: see `overlap.py`."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from overlap import OverlapRecorder


@pytest.fixture()
def overlap(monkeypatch: pytest.MonkeyPatch) -> OverlapRecorder:
    """Records which thread ran each prepared job and draw, and when it was asked for."""
    return OverlapRecorder(monkeypatch)
