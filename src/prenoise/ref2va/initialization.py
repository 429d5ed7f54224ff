"""Deterministic parameter initialisation from local generators (never the global RNG).

Modules are built on the ``meta`` device (no storage, no random draws) and then materialised:
every parameter is written explicitly from its own ``torch.Generator`` seeded from the model
seed and the parameter's qualified name, so adding a parameter never shifts the others.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)

InitRule = Callable[[str, tuple[int, ...], torch.Generator], "torch.Tensor | None"]
"""Optional override: ``(qualified_name, shape, generator) -> tensor`` or None for the default."""


def param_seed(seed: int, name: str) -> int:
    """Stable 63-bit seed for parameter ``name`` of a model initialised with ``seed``."""
    return (int(seed) * 0x9E3779B1 + zlib.crc32(name.encode("utf-8"))) % (2**63)


def default_init(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Biases zero, 1-D weights (norm scales) one, others ``N(0, 1/fan_in)``."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "bias":
        return torch.zeros(shape)
    if len(shape) <= 1:
        return torch.ones(shape)
    fan_in = math.prod(shape[1:])
    return torch.randn(shape, generator=gen) / math.sqrt(fan_in)


def build_on_meta(factory: Callable[[], M]) -> M:
    """Call ``factory`` with the meta device as default, so construction draws nothing."""
    with torch.device("meta"):
        return factory()


def materialize_(
    module: M,
    seed: int,
    device: torch.device | str = "cpu",
    rule: InitRule | None = None,
) -> M:
    """Replace every (meta) parameter of ``module`` by a deterministic tensor on ``device``.

    Tied parameters stay tied. The module is switched to eval mode with gradients disabled.
    """
    replaced: dict[int, nn.Parameter] = {}
    for mod_name, mod in module.named_modules():
        for p_name, param in list(mod._parameters.items()):
            if param is None:
                continue
            if id(param) not in replaced:
                qual = f"{mod_name}.{p_name}" if mod_name else p_name
                gen = torch.Generator("cpu").manual_seed(param_seed(seed, qual))
                shape = tuple(param.shape)
                value = rule(qual, shape, gen) if rule is not None else None
                if value is None:
                    value = default_init(qual, shape, gen)
                if tuple(value.shape) != shape:
                    raise ValueError(f"init rule for {qual} gave shape {tuple(value.shape)}")
                replaced[id(param)] = nn.Parameter(
                    value.to(device=device, dtype=torch.float32), requires_grad=False
                )
            mod._parameters[p_name] = replaced[id(param)]
        for b_name, buf in mod._buffers.items():
            if buf is not None and buf.is_meta:
                raise ValueError(f"buffer {mod_name}.{b_name} has no value after construction")
    return module.eval()
