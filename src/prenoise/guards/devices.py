"""Which torch devices a request may name, checked before any model loads."""

from __future__ import annotations

import torch

__all__ = ["check_device"]

_KINDS = ("cpu", "cuda", "mps", "xpu")


def check_device(name: str) -> str:
    """Return `name` if it is a device this process can run on: `cpu`, or an available
    `cuda[:N]`, `mps` or `xpu[:N]`. Raises `ValueError` with a one-line reason otherwise."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"unknown device {name!r} (use cpu, cuda or cuda:N)") from None
    if device.type not in _KINDS:
        raise ValueError(f"device {name!r} is not supported (use cpu, cuda or cuda:N)")
    if device.type == "cpu":
        return name
    backend = getattr(torch, device.type, None)
    if backend is None or not backend.is_available():
        raise ValueError(
            f"device {name!r}: no {device.type} device is available to torch {torch.__version__}"
        )
    if device.index is not None:
        count = int(backend.device_count()) if hasattr(backend, "device_count") else 1
        if device.index >= count:
            raise ValueError(f"device {name!r}: only {count} {device.type} device(s) here")
    return name
