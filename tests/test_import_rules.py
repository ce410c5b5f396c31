"""The import rules of docs/ARCHITECTURE.md, checked on dlprof's source: an AST walk over every module of ``dlprof/``
(imports at module level, inside functions and under ``TYPE_CHECKING`` alike), so nothing needs importing.

1. No torch on the analyze path: no module of trace/, analysis/, advice/, report/, results/, nor the analyze,
   diff and open workflows, nor any dlprof module they import, imports torch; and importing them all leaves torch (and
   Ray, imported only for ``--ray``) out of ``sys.modules``.
2. Renderers import results only: a module of report/ imports, of dlprof, only results/, core/errors and report/;
   and results import only the bottom floor (results/, and core/'s errors, schema, manifest and version).
3. trace/ and analysis/ never import capture/.
4. No circles between dlprof's modules, and no arrow running back up between the floors.
5. No module over 500 lines.

Each rule is a function of a module graph (``{module: modules it imports}``), tested below on small graphs that break
it, so that a rule that could never fail would fail here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "dlprof"

#: The floors, lowest first: a room (a subpackage, a top-level module, ``dlprof`` for the package root) imports
#: rooms on its own floor or below. (scripts/structure.py measures the same floors.)
FLOORS = (
    ("core", "results"),
    ("capture", "trace", "workloads"),
    ("analysis",),
    ("advice",),
    ("report",),
    ("workflows", "integrations", "tensorboard"),
    ("cli", "cli_options", "dlprof", "__main__", "hf", "notebook"),
)
FLOOR_OF = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}
#: The analyze path: these rooms, and these modules (``dlprof analyze`` and ``dlprof diff``, their output step).
TORCH_FREE_ROOMS = ("trace", "analysis", "advice", "report", "results")
TORCH_FREE_MODULES = (
    "dlprof.workflows.analyze",
    "dlprof.workflows.diff",
    "dlprof.workflows.open_trace",
    "dlprof.workflows.output",
    "dlprof.workflows.parallel",
)
#: No module of dlprof is longer (lines).
MAX_MODULE_LINES = 500
#: What a renderer may import of dlprof.
RENDERER_MAY_IMPORT = ("dlprof.results", "dlprof.core.errors", "dlprof.report")
#: What a result may import of dlprof: the bottom layer only.
RESULTS_MAY_IMPORT = (
    "dlprof.results",
    "dlprof.core.errors",
    "dlprof.core.schema",
    "dlprof.core.manifest",
    "dlprof.core.version",
)


# --- the module graph -------------------------------------------------------------------------------


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _imported(node: ast.AST, module: str, is_package: bool, modules: set[str]) -> list[str]:
    """The names one import statement imports: ``from a.b import c`` is ``a.b.c`` if that is a module, else ``a.b``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names]


def module_graph(root: Path) -> dict[str, set[str]]:
    """Every module under the package ``root`` and the modules it imports: dlprof's resolved to the module (or
    package) that exists, others (``torch.nn``, ``json``) as written."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        module = module_name(path, root)
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for name in _imported(node, module, path.name == "__init__.py", modules):
                if name.split(".")[0] == root.name:
                    while name not in modules and "." in name:
                        name = name.rpartition(".")[0]
                if name != module:
                    found.add(name)
        graph[module] = found
    return graph


def _internal(graph: dict[str, set[str]], module: str) -> set[str]:
    return {m for m in graph.get(module, ()) if m in graph}


# --- the rules --------------------------------------------------------------------------------------


def torch_importers(graph: dict[str, set[str]], seeds: set[str]) -> list[str]:
    """The modules that import torch among ``seeds`` and every module they import (their packages included: importing
    ``a.b.c`` runs ``a`` and ``a.b`` too), each with the path that reaches it."""
    reached = {seed: seed for seed in seeds if seed in graph}
    todo = sorted(reached)
    while todo:
        module = todo.pop()
        parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        for other in sorted(_internal(graph, module) | {p for p in parents if p in graph}):
            if other not in reached:
                reached[other] = f"{reached[module]} -> {other}"
                todo.append(other)
    return sorted(
        f"{how} imports {name}"
        for module, how in reached.items()
        for name in graph[module]
        if name == "torch" or name.startswith("torch.")
    )


def _outside(graph: dict[str, set[str]], room: str, may_import: tuple[str, ...]) -> list[str]:
    """Imports of dlprof modules by ``room`` beyond ``may_import`` (modules or packages)."""
    return sorted(
        f"{module} -> {other}"
        for module in graph
        if room_of(module) == room
        for other in _internal(graph, module)
        if not any(other == allowed or other.startswith(allowed + ".") for allowed in may_import)
    )


def renderer_violations(graph: dict[str, set[str]]) -> list[str]:
    return _outside(graph, "report", RENDERER_MAY_IMPORT)


def results_violations(graph: dict[str, set[str]]) -> list[str]:
    return _outside(graph, "results", RESULTS_MAY_IMPORT)


def capture_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} -> {other}"
        for module in graph
        if room_of(module) in ("trace", "analysis")
        for other in _internal(graph, module)
        if room_of(other) == "capture"
    )


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Sets of modules that import each other (strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(_internal(graph, start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, others = work[-1]
            other = next(others, None)
            if other is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(component) > 1:
                        found.append(sorted(component))
            elif other not in index:
                index[other] = low[other] = len(index)
                stack.append(other)
                work.append((other, iter(sorted(_internal(graph, other)))))
            elif other in stack:
                low[node] = min(low[node], index[other])
    return found


def back_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a lower floor to a higher one, and rooms on no floor."""
    found = [f"{room_of(m)} is on no floor" for m in graph if room_of(m) not in FLOOR_OF]
    found += [
        f"{module} (floor {FLOOR_OF[room_of(module)]}) -> {other} (floor {FLOOR_OF[room_of(other)]})"
        for module in graph
        for other in _internal(graph, module)
        if room_of(module) in FLOOR_OF
        and room_of(other) in FLOOR_OF
        and FLOOR_OF[room_of(other)] > FLOOR_OF[room_of(module)]
    ]
    return sorted(set(found))


# --- dlprof keeps them --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return module_graph(PACKAGE)


def _analyze_path(graph: dict[str, set[str]]) -> set[str]:
    return {m for m in graph if room_of(m) in TORCH_FREE_ROOMS} | set(TORCH_FREE_MODULES)


def test_the_graph_is_dlprofs(graph):
    assert {"dlprof", "dlprof.cli", "dlprof.results.report", "dlprof.workflows.analyze"} <= set(graph)
    assert set(TORCH_FREE_MODULES) <= set(graph), "a module of the analyze path moved: update TORCH_FREE_MODULES"
    assert "dlprof.results.report" in graph["dlprof.report.html"]  # a module-level import
    assert "dlprof.workflows.output" in graph["dlprof.cli"]  # an import inside a function


def test_no_torch_on_the_analyze_path(graph):
    assert torch_importers(graph, _analyze_path(graph)) == []


def test_importing_the_analyze_path_leaves_torch_and_ray_out(graph):
    """Ray too (``--ray`` imports it when asked for): an optional extra, seconds to import."""
    modules = sorted(m for m in _analyze_path(graph) if "bootstrap" not in m)
    code = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print('torch' in sys.modules, 'ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_renderers_import_results_only(graph):
    assert renderer_violations(graph) == []


def test_results_import_the_bottom_layer_only(graph):
    assert results_violations(graph) == []


def test_trace_and_analysis_never_import_capture(graph):
    assert capture_violations(graph) == []


def test_no_circles(graph):
    assert circles(graph) == []


def test_no_arrow_runs_back_up(graph):
    assert back_arrows(graph) == []


def test_no_module_is_over_the_size_of_one_room():
    """A module over MAX_MODULE_LINES holds more than one job: split it along a seam (docs/ARCHITECTURE.md)."""
    sizes = {
        path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert {path: lines for path, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}


# --- each rule can fail ---------------------------------------------------------------------------------


def test_torch_rule_follows_imports_and_packages():
    graph = {
        "dlprof": set(),
        "dlprof.trace": set(),
        "dlprof.trace.a": {"dlprof.trace.b", "json"},
        "dlprof.trace.b": {"torch.nn"},
        "dlprof.capture": {"torch"},
        "dlprof.capture.c": {"torch"},
    }
    assert torch_importers(graph, {"dlprof.trace.a"}) == ["dlprof.trace.a -> dlprof.trace.b imports torch.nn"]
    graph["dlprof.trace"] = {"dlprof.capture.c"}  # the package's __init__ runs too
    assert "dlprof.trace.a -> dlprof.trace -> dlprof.capture.c imports torch" in torch_importers(
        graph, {"dlprof.trace.a"}
    )
    assert torch_importers({"dlprof.trace.a": {"torchvision"}}, {"dlprof.trace.a"}) == []  # only torch itself


def test_renderer_rule():
    assert renderer_violations({"dlprof.report.x": {"dlprof.workflows.analyze"}, "dlprof.workflows.analyze": set()})
    assert renderer_violations({"dlprof.report.x": {"dlprof.capture.recorder"}, "dlprof.capture.recorder": set()})
    allowed = {"dlprof.results.report", "dlprof.core.errors", "dlprof.report.page"}
    assert renderer_violations({"dlprof.report.x": {*allowed, "json"}, **{m: set() for m in allowed}}) == []


def test_results_rule():
    graph = {
        "dlprof.results.x": {"dlprof.core.redact", "dlprof.core.manifest", "dataclasses"},
        "dlprof.core.redact": set(),
    }
    graph["dlprof.core.manifest"] = set()
    assert results_violations(graph) == ["dlprof.results.x -> dlprof.core.redact"]
    del graph["dlprof.core.redact"]
    graph["dlprof.results.x"] = {"dlprof.core.manifest", "dlprof.results.y"}
    graph["dlprof.results.y"] = set()
    assert results_violations(graph) == []


def test_capture_rule():
    graph = {"dlprof.analysis.a": {"dlprof.capture.recorder"}, "dlprof.capture.recorder": set()}
    assert capture_violations(graph) == ["dlprof.analysis.a -> dlprof.capture.recorder"]
    assert capture_violations({"dlprof.capture.recorder": {"dlprof.trace.run"}, "dlprof.trace.run": set()}) == []


def test_circle_rule():
    graph = {"dlprof.a": {"dlprof.b"}, "dlprof.b": {"dlprof.c"}, "dlprof.c": {"dlprof.a"}, "dlprof.d": {"dlprof.a"}}
    assert circles(graph) == [["dlprof.a", "dlprof.b", "dlprof.c"]]
    assert circles({"dlprof.a": {"dlprof.b"}, "dlprof.b": set()}) == []


def test_floor_rule():
    up = {"dlprof.results.x": {"dlprof.workflows.analyze"}, "dlprof.workflows.analyze": set()}
    assert back_arrows(up) == ["dlprof.results.x (floor 0) -> dlprof.workflows.analyze (floor 5)"]
    down = {"dlprof.workflows.analyze": {"dlprof.results.x"}, "dlprof.results.x": set()}
    assert back_arrows(down) == []
    assert back_arrows({"dlprof.newroom.x": set()}) == ["newroom is on no floor"]


def test_the_graph_reads_every_kind_of_import(tmp_path):
    root = tmp_path / "dlprof"
    (root / "trace").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "trace" / "__init__.py").write_text("from . import b\n")
    (root / "trace" / "b.py").write_text("")
    (root / "trace" / "a.py").write_text(
        "import typing\nfrom .b import thing\nif typing.TYPE_CHECKING:\n    from dlprof.trace.c import X\n"
        "def f():\n    import torch.nn\n    from dlprof import trace\n"
    )
    (root / "trace" / "c.py").write_text("from dlprof.trace.b import thing\n")
    graph = module_graph(root)
    assert graph["dlprof.trace.a"] == {"typing", "dlprof.trace.b", "dlprof.trace.c", "torch.nn", "dlprof.trace"}
    assert graph["dlprof.trace"] == {"dlprof.trace.b"}
    assert torch_importers(graph, {"dlprof.trace.c"}) == []
    assert torch_importers(graph, {"dlprof.trace.a"}) == ["dlprof.trace.a imports torch.nn"]
