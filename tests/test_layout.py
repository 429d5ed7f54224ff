"""The package layout keeps its layering: no import circle, and each layer imports only below it.

Every `import`/`from ... import` in `src/prenoise` counts, wherever it is written (module level,
inside a function, under `TYPE_CHECKING`): a deferred import is still a dependency. The layers
and what each may import are the ones `docs/architecture.md` draws.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

CORE = ("guards", "noise", "verify", "observe", "preparation")
ALLOWED: Mapping[str, frozenset[str]] = {
    "guards": frozenset(),
    "noise": frozenset({"guards"}),
    "verify": frozenset({"guards"}),
    "observe": frozenset({"guards"}),
    "preparation": frozenset({"guards", "noise", "verify", "observe"}),
    "": frozenset(CORE),  # prenoise/__init__.py: the public names of the core
    "ref2va": frozenset(CORE),
    "integrations.diffusers": frozenset(CORE),
    "integrations.vllm_omni": frozenset({*CORE, "ref2va"}),
    "integrations.sglang": frozenset({*CORE, "ref2va"}),
    "distributed": frozenset({*CORE, "ref2va"}),
    "serve": frozenset({*CORE, "ref2va"}),
    "cli": frozenset(
        {
            *CORE,
            "ref2va",
            "distributed",
            "serve",
            "integrations.vllm_omni",
            "integrations.diffusers",
            "integrations.sglang",
        }
    ),
    "__main__": frozenset({"cli"}),
    "integrations": frozenset(),
}
"""Layer -> the other layers its modules may import."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "prenoise").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    """The prenoise modules `name` imports (a `from pkg import sub` counts as `pkg.sub`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            subs = [f"{module}.{a.name}" for a in node.names]
            yield from (s for s in subs if s in MODULES)
            if module in MODULES and any(s not in MODULES for s in subs):
                yield module


GRAPH = {name: set(_imports(name, path)) - {name} for name, path in MODULES.items()}


def layer(module: str) -> str:
    """`prenoise.noise.kernel` -> `noise`; `prenoise.integrations.diffusers.call` ->
    `integrations.diffusers`; `prenoise` -> ``""``."""
    parts = module.split(".")[1:]
    if parts[:1] == ["integrations"] and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0] if parts else ""


def import_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def test_the_scan_sees_the_package() -> None:
    """A scan that finds nothing would pass everything."""
    assert {"prenoise.noise.kernel", "prenoise.preparation.draws", "prenoise.cli.commands"} <= set(
        MODULES
    )
    assert "prenoise.noise.kernel" in GRAPH["prenoise.preparation.draws"]
    assert "prenoise.noise.chunks" in GRAPH["prenoise.noise.streams"]


def test_no_module_imports_itself_back() -> None:
    assert import_cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_deferred_import_circle() -> None:
    """The check above fails on the kind of circle the old layout had (kernel <-> streams, one
    side deferred into a function)."""
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["prenoise.noise.kernel"].add("prenoise.noise.streams")
    assert ["prenoise.noise.kernel", "prenoise.noise.streams"] in import_cycles(graph)


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below_it(name: str) -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if layer(module) == name
        for target in targets
        if layer(target) != name and layer(target) not in ALLOWED[name]
    )
    assert wrong == []


def test_every_layer_is_listed() -> None:
    assert {layer(m) for m in MODULES} <= set(ALLOWED)


def test_no_module_is_over_600_lines() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


def test_the_public_names_and_entry_points_still_load() -> None:
    """The regrouping kept `prenoise.*` and the console script / plugin entry points."""
    import importlib
    from importlib.metadata import entry_points

    import prenoise

    assert all(getattr(prenoise, name, None) is not None for name in prenoise.__all__)
    assert prenoise.randn.__module__ == "prenoise.noise.normal"
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "prenoise"]
    assert script.value == "prenoise.cli:main"
    assert script.load() is importlib.import_module("prenoise.cli.commands").main
    (plugin,) = [e for e in entry_points(group="vllm_omni.general_plugins") if e.name == "prenoise"]
    assert plugin.load() is importlib.import_module("prenoise.integrations.vllm_omni").register


# Calls that serve prepared draws belong to the one preparation core (preparation/served.py,
# preparation/lookahead.py): an integration that makes them has grown its own replay queue.
CORE_ONLY_CALLS = {"set_state", "take", "cancel_pending"}


def core_only_calls(tree: ast.AST) -> list[str]:
    """`x.<name>(...)` calls of `CORE_ONLY_CALLS` in a module's syntax tree, by line."""
    return [
        f"line {node.lineno}: .{node.func.attr}()"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CORE_ONLY_CALLS
    ]


def test_no_integration_defines_its_own_replay_queue() -> None:
    """No integration sets generator states, takes from or cancels an executor's jobs itself:
    prepared draws are served only through `preparation.served` / `preparation.lookahead`."""
    own = {
        module: calls
        for module, path in MODULES.items()
        if layer(module).startswith("integrations")
        and (calls := core_only_calls(ast.parse(path.read_text())))
    }
    assert own == {}


def test_the_replay_queue_check_sees_one() -> None:
    """The check above fails on what the old integrations did (diffusers' queue rewound the
    caller's generators; vLLM-Omni took its jobs from the executor)."""
    old = "g.set_state(state)\nexecutor.take(name, actual=key)\nexecutor.cancel_pending()\n"
    assert core_only_calls(ast.parse(old)) == [
        "line 1: .set_state()",
        "line 2: .take()",
        "line 3: .cancel_pending()",
    ]
