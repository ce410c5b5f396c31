"""Comments say why, never what the code used to be or what a benchmark measured (docs/ARCHITECTURE.md keeps the
facts, with their numbers; docs/validation.md the benchmarks' tables).

Every comment and docstring of ``dlprof/`` is read (``tokenize`` for comments, consecutive comment lines joined;
``ast`` for docstrings) and checked against a few narrow patterns of history: a former value in parentheses
("(was 5 %)"), "used to be", "previously", a timing set against another ("took 3.41 s against 3.78 s"), a former
threshold ("was 5 %"), a date, a figure marked "measured", a median of N runs. The patterns are tested on bad and
good samples below, so that a pattern that could never fire, or fires on plain reasons, fails here.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "dlprof"

_UNIT = r"(?:ns|µs|us|ms|s|min|MB|MiB|GB|%|x|×)"
#: What history looks like in a comment, by what it is.
HISTORY = {
    "a former value in parentheses": re.compile(r"\(was [^)]*\)"),
    "'used to be'": re.compile(r"\bused to be\b", re.IGNORECASE),
    "'previously'": re.compile(r"\bpreviously\b", re.IGNORECASE),
    "a timing set against another": re.compile(r"\btook [0-9][0-9.,]* ?" + _UNIT + r"\b[^.;]*?\bagainst [0-9]"),
    "a former threshold": re.compile(r"\bwas [0-9][0-9.]* ?%"),
    "a date": re.compile(r"\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b"),
    "a figure marked as measured": re.compile(r"[0-9] ?" + _UNIT + r",? measured\b|\(measured\)"),
    "a median of N runs": re.compile(r"\bmedians? of [0-9]+\b(?! ?(?:steps|values|ranks))"),
}


def history_in(text: str) -> list[str]:
    """What in ``text`` reads as history: ``"<kind>: <the match>"`` for every pattern of :data:`HISTORY` that fires."""
    flat = " ".join(text.split())
    return [f"{kind}: {m.group(0)!r}" for kind, pattern in HISTORY.items() for m in pattern.finditer(flat)]


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """Every comment block (consecutive comment lines joined) and docstring of ``source``, with its first line."""
    texts: list[tuple[int, str]] = []
    block: list[str] = []
    start = last = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        if block and line != last + 1:
            texts.append((start, " ".join(block)))
            block = []
        if not block:
            start = line
        block.append(tok.string.lstrip("#:").strip())
        last = line
    if block:
        texts.append((start, " ".join(block)))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                texts.append((node.body[0].lineno, doc))
    return texts


def history_in_package(package: Path = PACKAGE) -> list[str]:
    """``path:line: kind: match`` for every comment or docstring of ``package`` that reads as history."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for line, text in comments_and_docstrings(path.read_text(encoding="utf-8")):
            found += [f"{path.relative_to(REPO)}:{line}: {hit}" for hit in history_in(text)]
    return found


def test_no_history_in_dlprof_comments() -> None:
    found = history_in_package()
    assert not found, (
        "comments say why, in a sentence: move measurements to docs/ARCHITECTURE.md's facts (or docs/validation.md)"
        " and what the code used to be to the commit message:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "bad",
    [
        "Within 2 % of the best (was 5 %).",
        "The threshold used to be 10 ms.",
        "Previously the trials ran one round.",
        "16 ranks at --processes 2 took 3.41 s against 3.78 s from a fork server.",
        "At 5 %, the rule was 5 % before.",
        "The last full runs (2026-12-01).",
        "imports the module once (0.14 s, measured)",
        "dlprof's analyze path: 22-24 MB measured",
        "16 ranks took longer (median of 5, 2 cores)",
    ],
)
def test_history_is_flagged(bad: str) -> None:
    assert history_in(bad)


@pytest.mark.parametrize(
    "good",
    [
        "Within 2 % of the best: a plateau bound by the main process drifts by a few per cent between launches.",
        "Advise persistent_workers when restarting workers costs at least 5 % of whole-epoch throughput.",
        "The previous setting's batches are served first.",
        "What the trials measured at the recommended count.",
        "Mean, median and 90th percentile of a per-step quantity, in ms.",
        "The step the decision was taken at, and the deciding rank.",
        "the median of 40 steps",
    ],
)
def test_reasons_are_not_flagged(good: str) -> None:
    assert not history_in(good)


def test_comments_are_found_in_blocks_and_docstrings() -> None:
    source = (
        '"""Module (was 1)."""\n\n# first line\n# (was 2) second\nX = 1\nY = 2  # (was 3)\n\n\ndef f():\n    """F."""\n'
    )
    texts = comments_and_docstrings(source)
    assert (3, "first line (was 2) second") in texts
    assert (6, "(was 3)") in texts
    assert sum(1 for _, t in texts for _ in history_in(t)) == 3
