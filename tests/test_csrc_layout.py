"""The C kernel's translation units depend on each other one way only, and MT19937 has its own.

`src/prenoise/noise/csrc/` is read as text (no compiler): the functions each file defines at top
level, and the names each function body uses. A unit is `X.c` with its header `X.h`; it offers
the other units its non-static functions and every function its header defines (static inline),
and it depends on a unit whose offered function one of its bodies names (called, or passed as a
function pointer) or whose `.c` it includes. `docs/architecture.md` describes the arrows.
"""

from __future__ import annotations

import graphlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "src" / "prenoise" / "noise" / "csrc"
CSRC_IN_REPO = CSRC.relative_to(ROOT).as_posix()

ENGINE = "mt19937"
DISPATCHER = "noise_kernel"
TOOL = "stream_dump"  # a program, not part of the extension
# What the MT engine offers (seed, twist, skip, float and double uniforms).
ENGINE_FUNCTIONS = frozenset(
    {"mt_seed", "mt_twist_block", "mt_skip", "mt_uniforms_scalar", "mt_uniforms_f64"}
)
# MT code that may live outside the engine: its instances compiled for a vector target.
VECTOR_SUFFIXES = ("_avx2", "_avx512")
X86_ONLY = "PRENOISE_HAVE_AVX2_BUILD"

# Comments go, string and character literals stay whole (a "/*" inside one is no comment).
LEXEMES = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")


@dataclass
class Unit:
    name: str
    offers: set[str] = field(default_factory=set)
    defines: set[str] = field(default_factory=set)
    uses: set[str] = field(default_factory=set)
    includes: set[str] = field(default_factory=set)  # units whose .c this one includes


def _without_comments(text: str) -> str:
    def keep(match: re.Match[str]) -> str:
        lexeme = match.group(0)
        if lexeme.startswith("/*"):
            return "\n" * lexeme.count("\n") or " "  # keeps directives on their own lines
        return "" if lexeme.startswith("//") else lexeme

    return LEXEMES.sub(keep, text)


def _definitions(code: str) -> Iterator[tuple[str, bool, str]]:
    """(name, is static, body) of each top-level function defined in `code` (no comments or
    directives left)."""
    depth, since, body_at = 0, 0, -1
    name, static = "", False
    for i, char in enumerate(code):
        if char == "{":
            if depth == 0:
                prefix = code[since:i].strip()
                head = re.search(r"(\w+)\s*\((?:[^()]|\([^()]*\))*\)$", prefix)
                if head and "=" not in prefix:
                    name, static, body_at = head.group(1), bool(re.search(r"\bstatic\b", prefix)), i
                else:
                    body_at = -1
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                if body_at >= 0:
                    yield name, static, code[body_at : i + 1]
                since = i + 1
        elif char == ";" and depth == 0:
            since = i + 1


def _units(csrc: Path) -> dict[str, Unit]:
    units: dict[str, Unit] = {}
    for path in sorted(csrc.glob("*.[ch]")):
        unit = units.setdefault(path.stem, Unit(path.stem))
        text = _without_comments(path.read_text())
        unit.includes |= {Path(f).stem for f in INCLUDE.findall(text) if f.endswith(".c")}
        code = LEXEMES.sub('""', DIRECTIVE.sub("", text))
        for name, static, body in _definitions(code):
            unit.defines.add(name)
            if path.suffix == ".h" or not static:
                unit.offers.add(name)
            unit.uses |= set(IDENTIFIER.findall(body))
    return units


def _graph(units: dict[str, Unit]) -> dict[str, set[str]]:
    """Unit -> the other units it depends on (a unit's own definitions shadow other units')."""
    return {
        name: {
            other.name
            for other in units.values()
            if other.name != name
            and ((unit.uses - unit.defines) & other.offers or other.name in unit.includes)
        }
        for name, unit in units.items()
    }


UNITS = _units(CSRC)
GRAPH = _graph(UNITS)


def test_no_circle_among_translation_units() -> None:
    try:
        order = list(graphlib.TopologicalSorter(GRAPH).static_order())
    except graphlib.CycleError as error:
        circle = " -> ".join(reversed(error.args[1]))  # graphlib lists dependencies first
        raise AssertionError(f"csrc units depend on each other in a circle: {circle}") from None
    assert set(order) == set(UNITS)


def test_the_parser_sees_the_known_arrows() -> None:
    """Guards the cycle check against passing vacuously (a parser that finds no dependency)."""
    assert {"box_muller_avx2", "box_muller_avx512", "box_muller_portable"} <= GRAPH[DISPATCHER]
    assert GRAPH[TOOL] >= UNITS[TOOL].includes == {DISPATCHER}
    assert "bm_blocks_scalar" in UNITS[DISPATCHER].offers
    assert "py_fill_f32" in UNITS[DISPATCHER].defines - UNITS[DISPATCHER].offers


def test_the_mt_engine_is_its_own_unit() -> None:
    assert ENGINE in set(UNITS), f"no {ENGINE}.c: the MT19937 engine has no unit of its own"
    missing = ENGINE_FUNCTIONS - UNITS[ENGINE].offers
    assert not missing, f"the engine does not offer {sorted(missing)}"
    assert GRAPH[ENGINE] == set(), f"the engine depends on {sorted(GRAPH[ENGINE])}"
    assert ENGINE in GRAPH[DISPATCHER]
    elsewhere = {
        (unit.name, function)
        for unit in UNITS.values()
        if unit.name != ENGINE
        for function in unit.defines
        if function.startswith("mt_") and not function.endswith(VECTOR_SUFFIXES)
    }
    assert not elsewhere, f"MT19937 code outside {ENGINE}.c/.h: {sorted(elsewhere)}"


def test_the_extension_builds_every_unit() -> None:
    """A unit missing from the sources still links (a shared object may leave symbols undefined)
    and then fails on import: the kernel would quietly fall back to torch."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (extension,) = config["tool"]["setuptools"]["ext-modules"]
    expected = {f"{CSRC_IN_REPO}/{name}.c" for name in UNITS if (CSRC / f"{name}.c").is_file()}
    assert set(extension["sources"]) == expected - {f"{CSRC_IN_REPO}/{TOOL}.c"}


def _reached(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for unit in GRAPH[todo.pop()] - seen:
            seen.add(unit)
            todo.append(unit)
    return seen


def _x86_only(name: str) -> bool:
    """Whether all of the unit's code follows its `#ifdef PRENOISE_HAVE_AVX2_BUILD` (so there is
    none on aarch64): nothing but directives comes before it."""
    text = _without_comments((CSRC / f"{name}.c").read_text())
    before, marker, _ = text.partition(f"#ifdef {X86_ONLY}")
    return bool(marker) and not DIRECTIVE.sub("", before).strip()


def test_the_aarch64_stream_dump_links_every_unit_it_reaches() -> None:
    """The Makefile's static aarch64 build of stream_dump (tests/test_aarch64_streams.py)."""
    makefile = (ROOT / "Makefile").read_text()
    rule = re.search(r"^\$\(AARCH64_DUMP\):(?:.*\n)+?\n", makefile, re.M)
    assert rule, "no $(AARCH64_DUMP) rule in the Makefile"
    # the recipe starts at the first tab-indented line that no "\\" continues onto
    prerequisites, recipe = re.split(r"(?<!\\)\n\t", rule.group(0), maxsplit=1)
    compiled = set(re.findall(r"\$\(CSRC\)/(\w+)\.c", recipe))
    # noise_kernel.c is included as text; the x86-only units hold no code on aarch64
    linked = {name for name in _reached(TOOL) - UNITS[TOOL].includes if not _x86_only(name)}
    assert compiled == linked | {TOOL}
    needed = {f"{name}.c" for name in _reached(TOOL) | {TOOL} if not _x86_only(name)}
    needed |= {path.name for path in CSRC.glob("*.h")}
    assert needed <= set(re.findall(r"\$\(CSRC\)/([\w.]+)", prerequisites))
