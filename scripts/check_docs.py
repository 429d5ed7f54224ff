"""Check the Markdown docs: links, anchors, shown commands, and no private-notes references.

Usage: `python scripts/check_docs.py [--root DIR]`. Prints one line per problem,
`FILE:LINE: what is wrong`, and exits 1 if there is any (0 otherwise). No network.

What it checks:
1. Every relative link and image in README.md, docs/**/*.md and benchmarks/**/*.md (inline,
   reference-style, `<a href>`) names an existing file or directory, relative to the Markdown
   file; a `#anchor` names a heading of the target Markdown file (GitHub's slugs). External links
   (any `scheme:`) are skipped; code blocks and inline code hold no links.
2. Commands in ```sh/bash/shell/console fences (console: `$ ` lines) resolve: `make X` targets,
   `prenoise SUB --option` (from the real parser, beside `prenoise.cli:main`), scripts run by
   path or by python/bash, and pytest paths. Unknown commands are accepted.
3. No file in README.md, docs/, benchmarks/**/*.md or src/ mentions the team's private notes
   folder (`PRIVATE_NOTES`): it is not part of the project.
4. Generated blocks are current: docs/recipes.md's key reference is what
   `prenoise.ref2va.recipe_docs.recipe_reference()` writes from the recipe model now.
5. Python snippets run: every ```python fence of those files runs, as written, in a fresh
   interpreter (this one, in an empty temporary directory) and exits 0, unless its first line
   is a comment saying what it needs that the docs cannot give (`# needs a checkpoint: …`, e.g.
   a loaded diffusers pipeline). So a snippet defines (or stands in for) everything it uses.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from pathlib import Path
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parent.parent
_NOTES_FOLDER = "shared"  # a sibling of the checkout, never shipped with the project
PRIVATE_NOTES = (f"../{_NOTES_FOLDER}", f"{_NOTES_FOLDER}/notes")
"""Paths of the team's private notes; spelled in pieces so this file does not point there."""
SHELL_LANGS = {"sh", "bash", "shell", "console"}
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
HTML_LINK = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
HTML_ANCHOR = re.compile(r"""\b(?:name|id)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PREFIX_COMMANDS = {"env", "time", "sudo", "nohup", "exec", "command"}
# `<checkpoint dir>`: a placeholder, no redirect
PLACEHOLDER = re.compile(r"<[A-Za-z][^<>]*>")
PLACEHOLDER_WORD = "\x01placeholder"
SEPARATORS = {"&&", "||", ";", "|", "&", "|&", "(", ")"}
# pytest options whose value is the next word (so it is not taken for a test path)
PYTEST_VALUE_OPTIONS = {
    "-k", "-m", "-p", "-c", "-o", "-n", "-W", "-r", "--deselect", "--ignore", "--ignore-glob",
    "--rootdir", "--maxfail", "--durations", "--tb", "--junitxml", "--basetemp", "--confcutdir",
    "--timeout", "--log-level", "--cov", "--import-mode", "--override-ini", "--capture",
    "--color", "--dist", "--junit-prefix", "--log-file", "--cache-show",
}  # fmt: skip
PYTHON_VALUE_OPTIONS = {"-X", "-W", "-Q"}
SNIPPET_LANGS = {"python", "py"}
NEEDS_CHECKPOINT = re.compile(r"#\s*needs a checkpoint\b")
"""A Python snippet's first line that marks it as not runnable from the docs alone."""
SNIPPET_TIMEOUT_S = 300
TORCHRUN_BOOL_OPTIONS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path"}

Problems = list[str]
Cli = Mapping[str, frozenset[str]]
"""prenoise subcommand -> its option strings."""
SnippetRunner = Callable[[str], "str | None"]
"""Runs a Python snippet; what is wrong with it, or None."""


def markdown_files(root: Path) -> list[Path]:
    files = [root / "README.md"] if (root / "README.md").is_file() else []
    for folder in ("docs", "benchmarks"):
        files += sorted((root / folder).rglob("*.md"))
    return files


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


# --- headings and anchors -------------------------------------------------------------------


def slug(text: str) -> str:
    """GitHub's heading anchor: lowercase; letters, marks, digits, `_` and `-` kept; each space
    becomes `-`; everything else dropped."""
    out = []
    for char in text.lower():
        if char == " ":
            out.append("-")
        elif char == "-" or unicodedata.category(char)[0] in "LMN" or char == "_":
            out.append(char)
    return "".join(out)


def _inline_text(token: Token) -> str:
    return "".join(
        child.content for child in token.children or () if child.type in ("text", "code_inline")
    )


def anchors_of(tokens: list[Token]) -> set[str]:
    """The anchors GitHub gives a file's headings (a repeated one gets `-1`, `-2`, ...), and
    those of HTML `name=`/`id=` attributes."""
    seen: set[str] = set()
    for i, token in enumerate(tokens):
        if token.type in ("html_block", "inline"):  # `<a name="x">`, `<span id="x">`
            html = [token] if token.type == "html_block" else token.children or []
            for part in html:
                if part.type in ("html_block", "html_inline"):
                    seen.update(HTML_ANCHOR.findall(part.content))
        if token.type != "heading_open":
            continue
        base = slug(_inline_text(tokens[i + 1]).strip())
        candidate, n = base, 0
        while candidate in seen:
            n += 1
            candidate = f"{base}-{n}"
        seen.add(candidate)
    return seen


class Docs:
    """Parsed Markdown files, cached (anchors of link targets are looked up repeatedly)."""

    def __init__(self) -> None:
        self._md = _parser()
        self._parsed: dict[Path, tuple[list[Token], dict]] = {}

    def parse(self, path: Path) -> tuple[list[Token], dict]:
        if path not in self._parsed:
            env: dict = {}
            tokens = self._md.parse(path.read_text(encoding="utf-8"), env)
            self._parsed[path] = (tokens, env)
        return self._parsed[path]

    def anchors(self, path: Path) -> set[str]:
        return anchors_of(self.parse(path)[0])


# --- links ----------------------------------------------------------------------------------


def iter_links(tokens: list[Token], env: dict) -> Iterator[tuple[int, str]]:
    """(0-based line, target) of every link and image; code spans and blocks hold none."""
    references = env.get("references", {})
    reference_hrefs = {ref["href"] for ref in references.values()}
    for ref in references.values():
        yield ref["map"][0], ref["href"]
    for token in tokens:
        if token.type == "html_block" and token.map:
            for line_offset, line in enumerate(token.content.splitlines()):
                for match in HTML_LINK.finditer(line):
                    yield token.map[0] + line_offset, match.group(1)
        if token.type != "inline" or not token.map:
            continue
        line = token.map[0]
        for child in token.children or ():
            if child.type in ("softbreak", "hardbreak"):
                line += 1
            elif child.type == "link_open" and child.markup != "autolink":
                href = str(child.attrs.get("href", ""))
                if href not in reference_hrefs:  # a reference's target is checked where defined
                    yield line, href
            elif child.type == "image":
                yield line, str(child.attrs.get("src", ""))
            elif child.type == "html_inline":
                for match in HTML_LINK.finditer(child.content):
                    yield line, match.group(1)


def check_link(root: Path, path: Path, href: str, docs: Docs) -> str | None:
    """What is wrong with the link `href` in `path`, or None."""
    if not href or SCHEME.match(href) or href.startswith("//"):
        return None  # external: not fetched
    target, _, anchor = href.partition("#")
    target = unquote(target.split("?", 1)[0])
    if not target:
        resolved = path
    elif target.startswith("/"):  # GitHub: relative to the repository root
        resolved = (root / target.lstrip("/")).resolve()
    else:
        resolved = (path.parent / target).resolve()
    if not resolved.is_relative_to(root):
        return f"link {href!r} points outside the repository"
    if not resolved.exists():
        return f"broken link {href!r}: {resolved.relative_to(root)} does not exist"
    if anchor and resolved.is_file() and resolved.suffix == ".md":
        anchor = unquote(anchor)
        anchors = docs.anchors(resolved)
        if anchor not in anchors and anchor.lower() not in anchors:
            where = "this file" if resolved == path else str(resolved.relative_to(root))
            return f"broken anchor {href!r}: no heading #{anchor} in {where}"
    return None


# --- the Makefile and the CLI ---------------------------------------------------------------

MAKE_RULE = re.compile(r"^([^\s:=#][^:=#]*?)\s*::?(?![=])")
MAKE_VARIABLE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?::=|\?=|=)\s*(.*)$")


def make_targets(makefile: Path) -> set[str]:
    """Targets of `^target:` rules and .PHONY lines, with simple `$(VAR)`s expanded."""
    if not makefile.is_file():
        return set()
    lines: list[str] = []
    for raw in makefile.read_text(encoding="utf-8").splitlines():
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1] + " " + raw.strip()
        else:
            lines.append(raw)
    variables: dict[str, str] = {}
    for line in lines:
        match = MAKE_VARIABLE.match(line)
        if match and not line.startswith("\t"):
            variables.setdefault(match.group(1), match.group(2).split("#")[0].strip())

    def expand(text: str) -> str:
        for _ in range(5):
            text = re.sub(
                r"\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]", lambda m: variables.get(m[1], m[0]), text
            )
        return text

    targets: set[str] = set()
    for line in lines:
        if line.startswith("\t"):
            continue
        match = MAKE_RULE.match(line)
        if not match:
            continue
        names = expand(match.group(1)).split()
        if names and names[0] == ".PHONY":
            targets.update(expand(line.split(":", 1)[1]).split())
        else:
            targets.update(names)
    return targets


def make_target_known(target: str, targets: set[str]) -> bool:
    if target in targets:
        return True
    patterns = (t.split("%", 1) for t in targets if t.count("%") == 1)
    return any(
        target.startswith(a) and target.endswith(b) and len(target) > len(a) + len(b)
        for a, b in patterns
    )


@cache
def real_cli() -> Cli:
    """The real `prenoise` subcommands and their option strings (imports prenoise: ~2 s).

    The parser comes from the module of `prenoise.cli:main`, the console script's entry point
    (`build_parser()` beside it), wherever the CLI's code lives."""
    import importlib

    import prenoise.cli

    parser = importlib.import_module(prenoise.cli.main.__module__).build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {
                name: frozenset(sub._option_string_actions) for name, sub in action.choices.items()
            }
    raise RuntimeError("the parser beside prenoise.cli:main has no subcommands")


# --- commands -------------------------------------------------------------------------------


def shell_lines(content: str, console: bool) -> Iterator[tuple[int, str]]:
    """(0-based line within the block, command) with `\\` continuations joined; in a console
    block only `$ ` lines (and their continuations) are commands."""
    pending: list[str] = []
    start = 0
    for i, raw in enumerate(content.splitlines()):
        line = raw.rstrip()
        if not pending:
            stripped = line.lstrip()
            if console:
                if not stripped.startswith("$ "):
                    continue
                line = stripped[2:]
            elif stripped.startswith("$ "):
                line = stripped[2:]
            start = i
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        yield start, " ".join(pending)
        pending = []
    if pending:
        yield start, " ".join(pending)


def split_command(line: str) -> list[list[str]] | None:
    """The simple commands of a shell line, as word lists (None if it does not parse)."""
    line = PLACEHOLDER.sub(PLACEHOLDER_WORD, line)  # `<checkpoint dir>` is no redirect
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:
        return None
    commands: list[list[str]] = [[]]
    for word in words:
        if word in SEPARATORS:
            commands.append([])
        elif word and set(word) <= set("<>&0123456789") and ("<" in word or ">" in word):
            commands[-1].append("\0redirect")
        else:
            commands[-1].append(word)
    out = []
    for words_ in commands:
        cleaned: list[str] = []
        skip_next = False
        for word in words_:
            if skip_next:
                skip_next = False
            elif word == "\0redirect":
                skip_next = True  # the redirect's file name
            else:
                cleaned.append(word)
        if cleaned:
            out.append(cleaned)
    return out


class CommandChecker:
    def __init__(self, root: Path, cli: Callable[[], Cli]) -> None:
        self.root = root
        self._cli = cli
        self._targets: set[str] | None = None

    @property
    def targets(self) -> set[str]:
        if self._targets is None:
            self._targets = make_targets(self.root / "Makefile")
        return self._targets

    def check_block(self, content: str, console: bool) -> Iterator[tuple[int, str]]:
        cwd: Path | None = self.root
        for offset, line in shell_lines(content, console):
            commands = split_command(line)
            for words in commands or ():
                words = strip_prefixes(words)
                if not words:
                    continue
                if words[0] == "cd":
                    cwd = self._cd(cwd, words[1:])
                    continue
                if cwd is None:
                    continue  # somewhere unknown: nothing to resolve against
                for problem in self.check_command(words, cwd):
                    yield offset, problem

    def _cd(self, cwd: Path | None, args: list[str]) -> Path | None:
        if cwd is None or not args:
            return None if args else self.root
        target = args[0]
        if "$" in target or target.startswith(("~", "/", "-")):
            return None
        resolved = (cwd / target).resolve()
        inside = resolved.is_relative_to(self.root) and resolved.is_dir()
        return resolved if inside else None

    def check_command(self, words: list[str], cwd: Path) -> Iterator[str]:
        command, args = words[0], words[1:]
        name = command.rsplit("/", 1)[-1]
        if name == "make" or name == "$(MAKE)":
            if cwd == self.root:  # elsewhere another Makefile (if any) applies
                yield from self.check_make(args)
        elif name == "prenoise":
            yield from self.check_prenoise(args)
        elif re.fullmatch(r"python(3(\.\d+)?)?|\$\(PY\)", name):
            yield from self.check_python(args, cwd)
        elif name == "pytest":
            yield from self.check_pytest(args, cwd)
        elif name == "torchrun":
            yield from self.check_torchrun(args, cwd)
        elif name in ("bash", "sh") and args and not args[0].startswith("-"):
            yield from self.check_path(args[0], cwd, "script")
        elif "/" in command:
            yield from self.check_path(command, cwd, "script")

    def check_path(self, path: str, cwd: Path, what: str) -> Iterator[str]:
        if "$" in path or "\x01" in path or path.startswith(("/", "~")) or "*" in path:
            return
        if path.startswith(".venv") or "/.venv" in path:
            return  # made by `make setup`, not part of the tree
        if not (cwd / path).exists():
            yield f"{what} {path} does not exist"

    def check_make(self, args: list[str]) -> Iterator[str]:
        skip_next = False
        for arg in args:
            if skip_next:
                skip_next = False
                continue
            if arg in ("-C", "-f", "--directory", "--file", "-I", "-o", "-W"):
                if arg in ("-C", "-f", "--directory", "--file"):
                    return  # another Makefile
                skip_next = True
            elif arg.startswith("-") or ASSIGNMENT.match(arg) or "$" in arg or "\x01" in arg:
                continue
            elif not make_target_known(arg, self.targets):
                yield f"make target {arg!r} is not in the Makefile"

    def check_prenoise(self, args: list[str]) -> Iterator[str]:
        i = 0
        while i < len(args) and args[i].startswith("-"):
            i += 1  # global options (`--debug`, `--help`)
        if i == len(args):
            return
        sub = args[i]
        if sub.startswith(("\x01", "[", "{")) or sub in ("...", "SUB", "COMMAND"):
            return  # a placeholder
        cli = self._cli()
        if sub not in cli:
            yield f"prenoise has no subcommand {sub!r} (it has: {', '.join(sorted(cli))})"
            return
        for arg in args[i + 1 :]:
            if arg == "--":
                break
            if arg.startswith("--"):
                option = arg.split("=", 1)[0]
                if option not in cli[sub]:
                    yield f"prenoise {sub} has no option {option}"

    def check_python(self, args: list[str], cwd: Path) -> Iterator[str]:
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-m":
                if i + 1 == len(args):
                    return
                module, rest = args[i + 1], args[i + 2 :]
                if module == "prenoise":
                    yield from self.check_prenoise(rest)
                elif module == "pytest":
                    yield from self.check_pytest(rest, cwd)
                return
            if arg == "-c" or arg == "-":
                return
            if arg in PYTHON_VALUE_OPTIONS:
                i += 2
                continue
            if arg.startswith("-"):
                i += 1
                continue
            yield from self.check_path(arg, cwd, "script")
            return

    def check_pytest(self, args: list[str], cwd: Path) -> Iterator[str]:
        skip_next = False
        for arg in args:
            if skip_next:
                skip_next = False
            elif arg in PYTEST_VALUE_OPTIONS:
                skip_next = True
            elif arg.startswith("-"):
                continue
            elif "/" in arg or arg.split("::", 1)[0].endswith(".py"):
                yield from self.check_path(arg.split("::", 1)[0], cwd, "test path")

    def check_torchrun(self, args: list[str], cwd: Path) -> Iterator[str]:
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-m":
                if i + 1 < len(args) and args[i + 1] == "prenoise":
                    yield from self.check_prenoise(args[i + 2 :])
                return
            if arg.startswith("-"):
                has_value = "=" not in arg and arg not in TORCHRUN_BOOL_OPTIONS
                i += 2 if has_value else 1
                continue
            if arg.endswith(".py"):
                yield from self.check_path(arg, cwd, "script")
            return


def strip_prefixes(words: list[str]) -> list[str]:
    """Drop leading `VAR=value` assignments and `env`/`time`/`sudo`-like wrappers."""
    i = 0
    while i < len(words):
        word = words[i]
        if ASSIGNMENT.match(word) or word in PREFIX_COMMANDS:
            i += 1
        elif word.startswith("-") and i > 0 and words[i - 1] in PREFIX_COMMANDS:
            i += 1  # `env -i`, `time -p`
        else:
            break
    return words[i:]


# --- the private notes folder ---------------------------------------------------------------


def private_note_files(root: Path) -> Iterator[Path]:
    if (root / "README.md").is_file():
        yield root / "README.md"
    for folder in ("docs", "src"):
        for path in sorted((root / folder).rglob("*")):
            parts = path.relative_to(root).parts
            generated = any(part == "__pycache__" or part.endswith(".egg-info") for part in parts)
            if path.is_file() and not generated:
                yield path
    yield from sorted((root / "benchmarks").rglob("*.md"))


def check_private_notes(root: Path) -> Problems:
    problems = []
    needles = [needle.encode() for needle in PRIVATE_NOTES]
    for path in private_note_files(root):
        data = path.read_bytes()
        if not any(needle in data for needle in needles):
            continue
        for number, line in enumerate(data.splitlines(), 1):
            found = [needle.decode() for needle in needles if needle in line]
            if found:
                problems.append(
                    f"{path.relative_to(root)}:{number}: mentions {found[0]!r}: the team's "
                    "private notes are not part of the project (say it under docs/)"
                )
    return problems


# --- generated blocks ------------------------------------------------------------------------


def real_generated() -> dict[str, tuple[str, str, str]]:
    """`{file: (begin marker, end marker, block)}` of every generated block (imports prenoise)."""
    from prenoise.ref2va.recipe_docs import BEGIN, END, recipe_reference

    return {"docs/recipes.md": (BEGIN, END, recipe_reference())}


def check_generated(root: Path, generated: Mapping[str, tuple[str, str, str]]) -> Problems:
    """A generated block that differs from what its generator writes now (files that exist)."""
    problems = []
    for name, (begin, end, block) in generated.items():
        path = root / name
        if not path.is_file():
            continue  # a missing page is a broken link wherever it is linked
        text = path.read_text()
        start, stop = text.find(begin), text.find(end)
        if start < 0 or stop < start:
            problems.append(f"{name}:1: the generated block ({begin!r} … {end!r}) is missing")
        elif text[start : stop + len(end)] != block:
            line = text.count("\n", 0, start) + 1
            problems.append(
                f"{name}:{line}: the generated block is stale: replace it with the output of "
                "`python -m prenoise.ref2va.recipe_docs`"
            )
    return problems


# --- Python snippets ------------------------------------------------------------------------


def needs_checkpoint(code: str) -> bool:
    """Whether the snippet's first non-blank line marks it `# needs a checkpoint: …`."""
    first = next((line.strip() for line in code.splitlines() if line.strip()), "")
    return bool(NEEDS_CHECKPOINT.match(first))


def run_snippet(code: str) -> str | None:
    """Run `code` in a fresh interpreter in an empty directory; what is wrong, or None."""
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    with tempfile.TemporaryDirectory(prefix="check_docs-") as tmp:
        try:
            done = subprocess.run(
                [sys.executable, "-c", code],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=SNIPPET_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"the python snippet ran past {SNIPPET_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    last = lines[-1] if lines else f"exit status {done.returncode}"
    return (
        f"the python snippet fails ({last}): define or stand in for what it uses, or mark it "
        "with a first line `# needs a checkpoint: …`"
    )


# --- all together ---------------------------------------------------------------------------


def check(
    root: Path,
    cli: Callable[[], Cli] = real_cli,
    generated: Callable[[], Mapping[str, tuple[str, str, str]]] = real_generated,
    snippets: SnippetRunner = run_snippet,
) -> Problems:
    """Every problem found under `root`, as `FILE:LINE: what is wrong` lines."""
    root = root.resolve()
    docs = Docs()
    commands = CommandChecker(root, cli)
    problems: Problems = []
    for path in markdown_files(root):
        rel = path.relative_to(root)
        tokens, env = docs.parse(path)
        for line, href in iter_links(tokens, env):
            problem = check_link(root, path, href, docs)
            if problem:
                problems.append(f"{rel}:{line + 1}: {problem}")
        for token in tokens:
            if token.type != "fence" or not token.map:
                continue
            lang = token.info.split()[0].lower() if token.info.split() else ""
            if lang in SNIPPET_LANGS and not needs_checkpoint(token.content):
                problem = snippets(token.content)
                if problem:
                    problems.append(f"{rel}:{token.map[0] + 1}: {problem}")
            if lang not in SHELL_LANGS:
                continue
            for offset, problem in commands.check_block(token.content, lang == "console"):
                problems.append(f"{rel}:{token.map[0] + 2 + offset}: {problem}")
    problems += check_private_notes(root)
    problems += check_generated(root, generated())
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this)")
    args = parser.parse_args(argv)
    problems = check(args.root)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
