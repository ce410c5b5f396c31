"""Every dataclass in dlprof/ with more than four fields is built by keyword (``kw_only=True``): a positional call
of a wide one reads as a row of numbers, and a field added in the middle would shift every value after it."""

from __future__ import annotations

import ast
from pathlib import Path

import dlprof

PACKAGE = Path(dlprof.__file__).parent
#: More fields than this, and the dataclass must be keyword-only.
MAX_POSITIONAL_FIELDS = 4


def _is_dataclass(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Name) and target.id == "dataclass"


def _kw_only(decorator: ast.expr) -> bool:
    return isinstance(decorator, ast.Call) and any(
        k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True for k in decorator.keywords
    )


def _fields(cls: ast.ClassDef) -> list[str]:
    return [
        s.target.id
        for s in cls.body
        if isinstance(s, ast.AnnAssign)
        and isinstance(s.target, ast.Name)
        and not ast.unparse(s.annotation).startswith(("ClassVar", "typing.ClassVar"))
    ]


def test_wide_dataclasses_are_keyword_only():
    wide_positional = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            for decorator in node.decorator_list:
                fields = _fields(node)
                if _is_dataclass(decorator) and len(fields) > MAX_POSITIONAL_FIELDS and not _kw_only(decorator):
                    wide_positional.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    assert not wide_positional, f"add kw_only=True to these dataclasses: {wide_positional}"
