"""Dynamic text in rich output, printed as it is.

rich reads every `str` it prints, and every `str` table cell, title and caption, as markup (and
`:name:` as an emoji): a path `out/[draft]/a.mp4` loses `[draft]`, an error `[rank 1] …` loses
its `[rank 1]`, and a text holding `[/x]` raises `MarkupError` instead of printing. So no text
made at run time (paths, error messages, verify summaries, recipe, field and machine names) is
given to rich as a `str`: it goes through one of these, which build a `Text` (never parsed; only
the styles named here apply):

- `line(*parts)`: a line for `console.print`; each part a plain string or a `(string, style)`
  pair, e.g. `line(("error:", "red"), " ", message)`. Highlighted as rich highlights a printed
  `str`, so a line with no brackets in it prints exactly as its markup string printed.
- `cell(*parts)`: a table cell (not highlighted: rich highlights no cell by default).
- `title(*parts)`, `caption(*parts)`: a table's title and caption, in the table's title and
  caption style.

`tests/test_console_text.py` checks every `console.print`, `Table.add_row`, `Table(title=,
caption=)` and `console.status` of `src/prenoise` for dynamic text that bypasses them.
"""

from __future__ import annotations

from rich.highlighter import ReprHighlighter
from rich.text import Text

__all__ = ["Part", "caption", "cell", "line", "title"]

Part = str | tuple[str, str]
"""Literal text, or literal text and the rich style (`"red"`, `"bold"`) it is shown in."""

_HIGHLIGHTER = ReprHighlighter()
"""What `Console.print` highlights a `str` with (its default highlighter)."""


def line(*parts: Part) -> Text:
    """One printed line of `parts`, each taken literally; highlighted as `Console.print`
    highlights a `str` (numbers, paths, ...), the parts' own styles on top."""
    text = Text.assemble(*parts)
    highlighted = _HIGHLIGHTER(text.plain)
    highlighted.copy_styles(text)
    return highlighted


def cell(*parts: Part) -> Text:
    """A table cell of literal `parts`."""
    return Text.assemble(*parts)


def title(*parts: Part) -> Text:
    """A table title of literal `parts` (a `Text` title gets no `title_style`: set here)."""
    return Text.assemble(*parts, style="table.title")


def caption(*parts: Part) -> Text:
    """A table caption of literal `parts`, in the caption style."""
    return Text.assemble(*parts, style="table.caption")
