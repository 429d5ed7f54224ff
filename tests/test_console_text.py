"""Text made at run time reaches rich literally (`prenoise.observe.console_text`).

rich reads a printed `str`, a `str` table cell, title and caption as markup: `[rank 1]` vanished
from the failed-rank line, `wrote [bold]{path}[/]` dropped `[draft]` from a path, a text holding
`[/x]` raised `MarkupError`. The source check below keeps every such call in `src/prenoise`
literal; the CLI's own paths are run in `tests/ref2va/test_cli_literal_text.py`.
"""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from prenoise.distributed import commands as distributed_commands
from prenoise.observe.console_text import caption, cell, line, title
from prenoise.observe.progress import CommandProgress

SRC = Path(__file__).resolve().parent.parent / "src" / "prenoise"

SAFE_CALLS = frozenset({"line", "cell", "title", "caption", "escape", "Text", "assemble"})
"""Calls whose result is literal text (or escaped markup)."""
NUMERIC_SPEC = re.compile(r"[^A-Za-z]*[bdeEfFgGnoxX%]")
"""A format spec such as `.3f` or `d`: a number's digits, never markup."""


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name(node.func)
    return ""


def _numeric(value: ast.FormattedValue) -> bool:
    spec = value.format_spec
    parts = spec.values if isinstance(spec, ast.JoinedStr) else []
    text = "".join(str(part.value) for part in parts if isinstance(part, ast.Constant))
    return len(parts) == 1 and NUMERIC_SPEC.fullmatch(text) is not None


def _literal(node: ast.expr, renderable_ok: bool = False) -> bool:
    """True when `node`, given to rich as markup, can hold no text made at run time: a literal,
    a `SAFE_CALLS` call, an f-string whose values are escaped or numbers, and (`renderable_ok`,
    `console.print`) a table: a name or call ending in `table`."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Call) and _name(node) in SAFE_CALLS:
        return True
    if isinstance(node, ast.JoinedStr):
        return all(
            isinstance(part, ast.Constant)
            or (isinstance(part, ast.FormattedValue) and _numeric(part))
            or (isinstance(part, ast.FormattedValue) and _name(part.value) == "escape")
            for part in node.values
        )
    if isinstance(node, ast.IfExp):
        return _literal(node.body, renderable_ok) and _literal(node.orelse, renderable_ok)
    if isinstance(node, ast.Starred) and isinstance(node.value, ast.ListComp | ast.GeneratorExp):
        return _literal(node.value.elt)
    return renderable_ok and isinstance(node, ast.Name | ast.Call) and _name(node).endswith("table")


def markup_leaks(source: str) -> list[tuple[int, str]]:
    """(line, call) of every rich call in `source` that may read run-time text as markup."""
    leaks = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        callee = _name(node)
        on_console = isinstance(node.func, ast.Attribute) and "console" in _name(node.func.value)
        checked: list[tuple[ast.expr, bool]] = []
        if callee == "print" and on_console:
            checked = [(arg, True) for arg in node.args]
        elif callee == "status" and on_console:
            checked = [(arg, False) for arg in node.args[:1]]
        elif callee == "add_row":
            checked = [(arg, False) for arg in node.args]
        elif callee == "Table":
            checked = [(k.value, False) for k in node.keywords if k.arg in ("title", "caption")]
        elif callee == "from_markup":
            checked = [(arg, False) for arg in node.args[:1]]
        elif callee == "TextColumn":  # formats the task's fields in, then parses markup
            markup = {k.arg: k.value for k in node.keywords}.get("markup")
            if not (isinstance(markup, ast.Constant) and markup.value is False):
                leaks.append((node.lineno, "TextColumn without markup=False"))
        leaks += [(node.lineno, callee) for arg, ok in checked if not _literal(arg, ok)]
    return leaks


def test_no_run_time_text_reaches_rich_as_markup() -> None:
    found = [
        f"{path.relative_to(SRC.parent)}:{lineno}: {call}"
        for path in sorted(SRC.rglob("*.py"))
        for lineno, call in markup_leaks(path.read_text())
    ]
    assert not found, "wrap run-time text in prenoise.observe.console_text:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'console.print(f"[red]error:[/] [rank {ctx.rank}] {error}")',
        'console.print(f"wrote [bold]{path}[/]")',
        'console.print("files: " + str(path))',
        "console.print(report.summary())",
        'self._console.print(f"{name!r}")',
        'table.add_row(name, f"{value:.3f}")',
        'table.add_row(f"stream {stream!r}", "x")',
        'table.add_row(f"{name:>10}")',
        'table.add_row("a", "[green]yes[/]" if ok else f"[red]NO[/] {n}")',
        "table.add_row(*cells)",
        'Table(title=f"{recipe.name}: serial")',
        'Table(caption="a " + sentence)',
        'console.status(f"loading {name}")',
        'TextColumn("{task.description}")',
        "Text.from_markup(message)",
    ],
)
def test_the_check_flags_run_time_text(source: str) -> None:
    assert markup_leaks(source)


@pytest.mark.parametrize(
    "source",
    [
        'console.print("[red]interrupted[/]")',
        'console.print(line(("error:", "red"), f" [rank {rank}] {error}"), soft_wrap=True)',
        'console.print(f"[red]error:[/] {escape(str(error))}")',
        "console.print(table)",
        "console.print(_stage_table(name, seconds))",
        'table.add_row(cell(name), f"{value:.3f}", f"{a * 1e3:.1f}")',
        'table.add_row("why", cell(status.reason))',
        'table.add_row(cell(key), *[f"{v:.3f}" for v in values])',
        'Table(title=title(f"{recipe.name}: serial"), caption=caption("a", (s, "yellow")))',
        'TextColumn("{task.description}", markup=False)',
        "print(f'{path}')",  # not rich
    ],
)
def test_the_check_accepts_literal_text(source: str) -> None:
    assert markup_leaks(source) == []


def _printed(*objects: object, terminal: bool = False) -> str:
    out = io.StringIO()
    console = Console(
        file=out, width=100, force_terminal=terminal, color_system="truecolor" if terminal else None
    )
    console.print(*objects, soft_wrap=True)
    return out.getvalue()


@pytest.mark.parametrize("terminal", [False, True])
def test_ordinary_text_prints_byte_identical_to_the_markup_it_replaces(terminal: bool) -> None:
    path = "out/clip_1.mp4"
    pairs = [
        (f"wrote [bold]{path}[/]", line("wrote ", (path, "bold"))),
        (
            "[red]error:[/] stage 'x' failed after 1.5 s (3, 4)",
            line(("error:", "red"), " stage 'x' failed after 1.5 s (3, 4)"),
        ),
        (
            "[green]bitwise equal: 3/3 fields; global RNG unchanged[/]",
            line(("bitwise equal: 3/3 fields; global RNG unchanged", "green")),
        ),
        (f"threads: 4; machine: x86_64 {path}", line(f"threads: 4; machine: x86_64 {path}")),
    ]
    for markup, text in pairs:
        assert _printed(text, terminal=terminal) == _printed(markup, terminal=terminal)

    def table(heading: str | Text, note: str | Text, cells: list[str | Text]) -> Table:
        made = Table(title=heading, caption=note)
        made.add_column("field")
        made.add_column("equal")
        made.add_row(*cells)
        return made

    old = table("r: serial", "1.0M; [yellow]drift[/]", ["video", "[red]NO[/] 3"])
    new = table(
        title("r: serial"),
        caption("1.0M; ", ("drift", "yellow")),
        [cell("video"), cell(("NO", "red"), " 3")],
    )
    assert _printed(new, terminal=terminal) == _printed(old, terminal=terminal)


@pytest.mark.parametrize("text", ["out/[draft]/a.mp4", "x[bold]y[/]", "bad [/x] tag", ":smile: \\"])
def test_brackets_and_emoji_codes_print_as_they_are(text: str) -> None:
    assert _printed(line(("error:", "red"), f" {text}")) == f"error: {text}\n"
    table = Table(title=title(text), show_header=False, box=None)
    table.add_column("x", overflow="fold")
    table.add_row(cell(text))
    assert text in _printed(table)
    assert escape(text)  # the markup route it replaces would need this for each value


def test_a_failed_rank_keeps_its_rank_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    error = RuntimeError("draw 'video' [/x] failed on the worker")
    distributed_commands._print_rank_failure(1, error)
    assert capsys.readouterr().out == "error: [rank 1] draw 'video' [/x] failed on the worker\n"


def test_live_progress_shows_stage_names_literally() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with CommandProgress(console, "generate") as progress:
        progress.stage("denoise [/x] x[bold]y[/]", 3)
        progress.advance(1)
    assert "denoise [/x] x[bold]y[/]" in out.getvalue()
