"""Parsing untrusted YAML and JSON documents into plain data, with every failure one line.

A parser raises more than its own syntax error on bad input: an integer literal longer than
Python's int-string limit (4,300 digits by default) is a plain `ValueError`, a YAML date such as
`2024-13-01` another, and nesting deeper than the recursion limit a `RecursionError`. All of
them are the document's fault, so all become one :class:`DocumentError` the caller prefixes
with the file or field (recipes, checkpoint `config.json`, `prenoise serve` bodies).

A hostile document must also cost bounded time and memory before it is refused:

- size: :func:`read_document` reads at most `MAX_DOCUMENT_BYTES` (1 MiB; recipes are ~1 KB), in
  chunks, from a regular file only (`/dev/zero`, a named pipe, a 10 GB sparse file are refused
  from their `stat`, nothing read); :func:`check_document_file` is the same check for a command
  line option before anything opens the file; :func:`load_yaml` refuses longer texts;
- expansion: YAML aliases repeat what an anchor names without copying it, so 570 bytes of nested
  aliases stand for ~9^12 values that every later walk (the depth check, validation) visits one
  by one. :func:`load_yaml` composes the node graph first (linear in the text), counts what it
  expands to (each shared node once, memoised: linear in the graph), and refuses more than
  `MAX_NODES` values, and an alias that contains itself, before anything is constructed.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable
from typing import Any

import yaml

from prenoise.guards.path_checks import file_kind
from prenoise.guards.usage import UsageError

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_NODES",
    "DocumentError",
    "check_document_file",
    "document_file_problem",
    "load_json",
    "load_yaml",
    "read_document",
]

MAX_DEPTH = 64
"""Nesting a recipe or checkpoint config may have (theirs is 3 levels): deeper documents are
refused before code that walks them recursively sees them."""


MAX_DOCUMENT_BYTES = 2**20
"""Bytes a recipe or config document may have (the shipped recipes have ~1 KB)."""

MAX_NODES = 100_000
"""Values (scalars, lists, mappings) a YAML document may expand to, every alias counted as
what it repeats (the shipped recipes have ~60)."""


class DocumentError(ValueError):
    """A document that does not parse into bounded plain data; the message says why."""


def _size_problem(size: int, max_bytes: int) -> str | None:
    if size <= max_bytes:
        return None
    return f"is {size:,} bytes, over the {max_bytes:,}-byte limit for a document"


def document_file_problem(
    path: str | os.PathLike[str], max_bytes: int = MAX_DOCUMENT_BYTES
) -> str | None:
    """Why `path` cannot be read as a document, from its `stat` alone (nothing is opened): not
    a regular file (a device, a named pipe, a directory), or larger than `max_bytes`. None when
    it can, or when it cannot be examined at all (the reader then says why)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return _stat_problem(st, max_bytes)


def _stat_problem(st: os.stat_result, max_bytes: int) -> str | None:
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        return f"is {file_kind(st.st_mode) or 'a special file'}, not a regular file"
    return _size_problem(st.st_size, max_bytes)


def check_document_file(
    path: str | os.PathLike[str], option: str, max_bytes: int = MAX_DOCUMENT_BYTES
) -> None:
    """Refuse (`UsageError` naming `option`) a document path that is no regular file or is over
    `max_bytes`, before anything opens it. A missing or unreadable path passes: its reader
    names what is wrong (and, for a recipe, the shipped ones)."""
    problem = document_file_problem(path, max_bytes)
    if problem is not None:
        raise UsageError(
            f"{option} {os.fspath(path)}: {problem}; give a regular file of at most "
            f"{max_bytes:,} bytes"
        )


def read_document(path: str | os.PathLike[str], max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of the regular file `path`, read in bounded chunks: at most `max_bytes`
    are read, whatever the file claims or turns into while it is read.

    `OSError` when it cannot be opened (the caller names the file); :class:`DocumentError` when
    it is not a regular file (a named pipe is opened without waiting for a writer), is over
    `max_bytes` (by its size, before a byte is read), or is not UTF-8.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        problem = _stat_problem(os.fstat(fd), max_bytes)
        if problem is not None:
            raise DocumentError(problem)
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(2**16, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # it grew while being read
                raise DocumentError(f"is over the {max_bytes:,}-byte limit for a document")
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not a text file (not UTF-8 at byte {exc.start})") from None


def load_json(text: str | bytes, max_depth: int | None = MAX_DEPTH) -> Any:
    """`json.loads(text)`, nested at most `max_depth` levels (None: up to the recursion limit)."""

    def parse(source: str | bytes) -> Any:
        try:
            return json.loads(source)
        except json.JSONDecodeError as exc:
            raise DocumentError(f"not valid JSON ({exc})") from None

    return _bounded(parse, text, max_depth, "JSON")


def load_yaml(
    text: str,
    max_depth: int | None = MAX_DEPTH,
    *,
    max_chars: int | None = MAX_DOCUMENT_BYTES,
    max_nodes: int | None = MAX_NODES,
) -> Any:
    """`yaml.safe_load(text)`, nested at most `max_depth` levels, of at most `max_chars`
    characters, expanding (aliases repeated) to at most `max_nodes` values; an alias inside
    what it names is refused. Checked on the composed node graph, before any construction."""
    if max_chars is not None and len(text) > max_chars:
        raise DocumentError(f"YAML has {len(text):,} characters, over the {max_chars:,} limit")

    def parse(source: str) -> Any:
        loader = yaml.SafeLoader(source)
        try:
            node = loader.get_single_node()  # the graph: an alias is the node it names, shared
            if node is None:
                return None
            if max_nodes is not None:
                _check_expansion(node, max_nodes)
            return loader.construct_document(node)
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DocumentError(f"not valid YAML ({first})") from None
        finally:
            loader.dispose()

    return _bounded(parse, text, max_depth, "YAML")


def _node_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: yaml.Node, max_nodes: int) -> None:
    """Refuse a node graph that expands to more than `max_nodes` values, or holds a cycle.

    Iterative and memoised by node: each shared node is counted once, so the cost is linear in
    the graph, whatever it expands to. A merge key (`<<: *a`) counts what it merges, so the count
    bounds the merged mappings too."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    pending: list[tuple[yaml.Node, bool]] = [(root, False)]
    while pending:
        node, finished = pending.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _node_children(node))
            if total > max_nodes:
                raise DocumentError(
                    f"YAML expands to more than {max_nodes:,} values (its aliases repeat what "
                    "they name); write the values out or use fewer aliases"
                )
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise DocumentError(
                "YAML has an alias inside what it names (a recursive structure); remove it"
            )
        on_path.add(key)
        pending.append((node, True))
        pending.extend((child, False) for child in _node_children(node) if id(child) not in sizes)


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
