"""Checkpoints: one safetensors file per component plus ``config.json`` in a directory.

safetensors is imported by the functions that read or write weights (the ``ref2va`` extra), so
:class:`CheckpointError` and the config helpers import without it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from prenoise.guards.atomic import atomic_output, write_atomic
from prenoise.guards.documents import DocumentError, load_json, read_document

CONFIG_FILE = "config.json"
"""Name of the config file inside a checkpoint directory."""
FORMAT = "prenoise-ref2va"
"""Value of the ``format`` field of ``config.json``."""
VERSION = 1
"""Checkpoint layout version."""


class CheckpointError(ValueError):
    """A checkpoint is missing, or does not match the modules it is loaded into."""


def _unique_state(module: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """State of ``module`` with tied tensors kept once: ``(unique, alias -> kept name)``."""
    unique: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    for name, tensor in module.state_dict().items():
        key = (tensor.device, tensor.data_ptr(), tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if tensor.numel() and key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        unique[name] = tensor
    return unique, aliases


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> ``{"a.b": value}``."""
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_mismatches(found: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    """Keys (dotted) whose values differ between two nested config dicts, with both values."""
    a, b = _flatten(dict(found)), _flatten(dict(expected))
    return [
        f"{key!r}: checkpoint has {a.get(key, '<missing>')!r}, expected {b.get(key, '<missing>')!r}"
        for key in sorted(set(a) | set(b))
        if a.get(key, "<missing>") != b.get(key, "<missing>")
    ]


def save_checkpoint(
    directory: str | os.PathLike[str], modules: Mapping[str, nn.Module], config: Mapping[str, Any]
) -> Path:
    """Write ``<name>.safetensors`` for every module and ``config.json`` holding ``config``."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for name, module in modules.items():
        unique, _ = _unique_state(module)
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in unique.items()}
        with atomic_output(out / f"{name}.safetensors") as tmp:
            save_file(tensors, str(tmp), metadata={"component": name})
    meta = {"format": FORMAT, "version": VERSION, "components": sorted(modules), "model": config}
    write_atomic(out / CONFIG_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out


def read_checkpoint_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The model config stored in a checkpoint directory."""
    base = Path(directory)
    if not base.is_dir():
        what = "a file" if base.exists() else "missing"
        raise CheckpointError(f"{base}: not a checkpoint directory ({what}; give the directory)")
    path = base / CONFIG_FILE
    try:
        meta = load_json(read_document(path))  # a regular file of at most 1 MiB, read bounded
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file (not a checkpoint directory)") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except DocumentError as exc:  # not a regular file, too big, not UTF-8; huge integers, nesting
        raise CheckpointError(f"{path}: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a {FORMAT} checkpoint")
    model = meta.get("model")
    if not isinstance(model, dict):
        raise CheckpointError(f"{path}: missing 'model' config")
    return model


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of one `.safetensors` file; a damaged file (empty, truncated, zeroed, a
    header length past the file) is a `CheckpointError` naming it, not an internal error."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{path}: not a valid safetensors file ({exc})") from None


def load_checkpoint(
    directory: str | os.PathLike[str],
    modules: Mapping[str, nn.Module],
    expected_config: Mapping[str, Any] | None = None,
) -> None:
    """Load weights into ``modules`` in place (bit-exact), after checking the config matches."""
    base = Path(directory)
    found = read_checkpoint_config(base)
    if expected_config is not None:
        diffs = config_mismatches(found, expected_config)
        if diffs:
            raise CheckpointError(f"{base}: config mismatch at {diffs[0]}")
    for name, module in modules.items():
        path = base / f"{name}.safetensors"
        if not path.is_file():
            raise CheckpointError(f"{path}: missing weights for component {name!r}")
        tensors = _read_weights(path)
        unique, _ = _unique_state(module)
        missing = sorted(set(unique) - set(tensors))
        extra = sorted(set(tensors) - set(unique))
        if missing:
            raise CheckpointError(f"{path}: missing tensor {missing[0]!r}")
        if extra:
            raise CheckpointError(f"{path}: unexpected tensor {extra[0]!r}")
        for key, target in unique.items():
            value = tensors[key]
            if value.shape != target.shape or value.dtype != target.dtype:
                raise CheckpointError(
                    f"{path}: tensor {key!r} is {value.dtype} {tuple(value.shape)}, "
                    f"module expects {target.dtype} {tuple(target.shape)}"
                )
        with torch.no_grad():
            for key, target in unique.items():
                target.copy_(tensors[key])
