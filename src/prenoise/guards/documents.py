"""Parsing untrusted YAML and JSON documents into plain data, with every failure one line.

A parser raises more than its own syntax error on bad input: an integer literal longer than
Python's int-string limit (4,300 digits by default) is a plain `ValueError`, a YAML date such as
`2024-13-01` another, and nesting deeper than the recursion limit a `RecursionError`. All of
them are the document's fault, so all become one :class:`DocumentError` the caller prefixes
with the file or field (recipes, checkpoint `config.json`, `prenoise serve` bodies).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import yaml

__all__ = ["MAX_DEPTH", "DocumentError", "load_json", "load_yaml"]

MAX_DEPTH = 64
"""Nesting a recipe or checkpoint config may have (theirs is 3 levels): deeper documents are
refused before code that walks them recursively sees them."""


class DocumentError(ValueError):
    """A document that does not parse into bounded plain data; the message says why."""


def load_json(text: str | bytes, max_depth: int | None = MAX_DEPTH) -> Any:
    """`json.loads(text)`, nested at most `max_depth` levels (None: up to the recursion limit)."""

    def parse(source: str | bytes) -> Any:
        try:
            return json.loads(source)
        except json.JSONDecodeError as exc:
            raise DocumentError(f"not valid JSON ({exc})") from None

    return _bounded(parse, text, max_depth, "JSON")


def load_yaml(text: str, max_depth: int | None = MAX_DEPTH) -> Any:
    """`yaml.safe_load(text)`, nested at most `max_depth` levels."""

    def parse(source: str) -> Any:
        try:
            return yaml.safe_load(source)
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DocumentError(f"not valid YAML ({first})") from None

    return _bounded(parse, text, max_depth, "YAML")


def _bounded(parse: Callable[[Any], Any], text: Any, max_depth: int | None, kind: str) -> Any:
    """`parse(text)` with the non-syntax failures of bad `kind` input made `DocumentError`s."""
    try:
        data = parse(text)
    except DocumentError:
        raise
    except RecursionError:
        raise DocumentError(f"{kind} nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not a {kind} text file (not UTF-8 at byte {exc.start})") from None
    except ValueError as exc:  # the int-string limit, or a value such as an impossible date
        raise DocumentError(f"{kind} has {_value_problem(exc)}") from None
    if max_depth is not None and _depth(data, max_depth) > max_depth:
        raise DocumentError(f"{kind} nested more than {max_depth} levels deep")
    return data


def _value_problem(exc: ValueError) -> str:
    """What a parser's `ValueError` says about the document, in one line."""
    limit = sys.get_int_max_str_digits()
    if limit and "integer string conversion" in str(exc):
        return f"an integer literal longer than {limit} digits (Python's int-string limit)"
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"a value that cannot be read ({first})"


def _depth(data: Any, stop: int) -> int:
    """Nesting depth of lists and dicts in `data` (iterative; stops counting past `stop`)."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(data, 0)]
    while pending:
        item, level = pending.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, level + 1)
        if deepest > stop:
            return deepest
        children = item.values() if isinstance(item, dict) else item
        pending.extend((child, level + 1) for child in children)
    return deepest
