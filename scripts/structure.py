"""Measure the house: dlprof's rooms, floors, the arrows between them, circles, arrows running back up, and the longest
functions.

    python scripts/structure.py [--top 10] [--json]

A *room* is a subpackage of ``dlprof`` (``core``, ``capture``, ``trace``, ...) or a top-level module (``cli``,
``hf``, ...); the package root ``dlprof/__init__.py`` is the room ``dlprof``. An *arrow* is a room
that imports another (at module level or inside a function; ``TYPE_CHECKING`` imports count too, since
they say what a room depends on). *Floors* are the intended layers of docs/ARCHITECTURE.md, lowest
first; an arrow *runs back up* when it goes from a lower floor to a higher one. A *circle* is a set of
modules that import each other (a strongly connected component of the module graph of over one
module), counted on modules because a circle inside one room is as much a knot as one between rooms.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dlprof"

#: The intended floors, lowest first (docs/ARCHITECTURE.md). A room that is not listed is on no floor
#: and is reported as such.
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


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "dlprof"


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The dlprof modules ``path`` imports (``from dlprof.x import y`` counts ``dlprof.x.y`` when that is a module)."""
    module = module_name(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, module, path.name == "__init__.py")
            names = [
                f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target for alias in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components of over one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def longest_functions(paths: list[Path], top: int) -> list[tuple[int, str]]:
    rows = []
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                rows.append((length, f"{path.relative_to(ROOT)}:{node.name}"))
    return sorted(rows, reverse=True)[:top]


def _module_arrows(graph: dict[str, set[str]], room_a: str, room_b: str) -> list[str]:
    """The module imports behind the room arrow ``room_a -> room_b``."""
    return sorted(
        f"{m}->{t}" for m, targets in graph.items() if room_of(m) == room_a for t in targets if room_of(t) == room_b
    )


def _module_arrows(graph: dict[str, set[str]], room_a: str, room_b: str) -> list[str]:
    """The module imports behind the room arrow ``room_a -> room_b``."""
    return sorted(
        f"{m}->{t}" for m, targets in graph.items() if room_of(m) == room_a for t in targets if room_of(t) == room_b
    )


def measure(top: int) -> dict:
    paths = sorted(p for p in PACKAGE.rglob("*.py") if "bootstrap" not in p.parts)
    modules = {module_name(p) for p in paths}
    graph = {module_name(p): imports_of(p, modules) for p in paths}
    rooms = sorted({room_of(m) for m in modules})
    arrows = sorted(
        {(room_of(a), room_of(b)) for a, targets in graph.items() for b in targets if room_of(a) != room_of(b)}
    )
    back = [(a, b) for a, b in arrows if a in FLOOR_OF and b in FLOOR_OF and FLOOR_OF[b] > FLOOR_OF[a]]
    lines = sum(len(p.read_text().splitlines()) for p in paths)
    long_lines = sum(1 for p in paths for line in p.read_text().splitlines() if len(line) > 120)
    return {
        "lines": lines,
        "modules": len(modules),
        "rooms": rooms,
        "floors": [[r for r in floor if r in rooms] for floor in FLOORS],
        "unplaced_rooms": [r for r in rooms if r not in FLOOR_OF],
        "arrows": [f"{a} -> {b}" for a, b in arrows],
        "circles": strongly_connected(graph),
        "back_arrows": [f"{a} -> {b} ({' '.join(_module_arrows(graph, a, b))})" for a, b in back],
        "longest_functions": [f"{n:4d}  {where}" for n, where in longest_functions(paths, top)],
        "lines_over_120": long_lines,
        "fmt_skip_markers": sum(p.read_text().count("# fmt: skip") for p in paths),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="longest functions to list")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    found = measure(args.top)
    if args.json:
        print(json.dumps(found, indent=1))
        return
    print(
        f"{found['lines']} lines in {found['modules']} modules, {len(found['rooms'])} rooms:"
        f" {', '.join(found['rooms'])}"
    )
    print(f"floors ({len(found['floors'])}), lowest first:")
    for level, floor in enumerate(found["floors"]):
        print(f"  {level}: {', '.join(floor) or '-'}")
    if found["unplaced_rooms"]:
        print(f"rooms on no floor: {', '.join(found['unplaced_rooms'])}")
    print(f"arrows between rooms: {len(found['arrows'])}")
    for arrow in found["arrows"]:
        print(f"  {arrow}")
    print(f"circles (modules importing each other): {len(found['circles'])}")
    for circle in found["circles"]:
        print(f"  {' <-> '.join(circle)}")
    print(f"arrows running back up: {len(found['back_arrows'])}")
    for arrow in found["back_arrows"]:
        print(f"  {arrow}")
    print("longest functions (lines):")
    for row in found["longest_functions"]:
        print(f"  {row}")
    print(f"lines over 120 characters: {found['lines_over_120']}; '# fmt: skip' markers: {found['fmt_skip_markers']}")


if __name__ == "__main__":
    main()
