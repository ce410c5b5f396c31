"""The documentation holds together: every relative link and #anchor resolves, and the README stays a front door."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 220
#: CI (.ci/run) and contributors run "the test command in README.md": it must stay there.
TEST_COMMAND = "bash scripts/test.sh"

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def doc_files() -> list[Path]:
    return [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose_lines(text: str, keep_inline_code: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks; inline code removed unless kept (links in code are not links)."""
    lines, in_fence = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append((number, line if keep_inline_code else _INLINE_CODE.sub("", line)))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors on its text
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a Markdown file; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    # A heading's inline code is part of its anchor.
    for _, line in _prose_lines(path.read_text(encoding="utf-8"), keep_inline_code=True):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    """What does not resolve among a Markdown file's relative links: a missing file, or an anchor with no heading."""
    problems = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in _LINK.findall(line):
            if _EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            linked = path if not file_part else (path.parent / file_part).resolve()
            where = f"{path.name}:{number}: {target}"
            if not linked.exists():
                problems.append(f"{where}: no such file")
            elif anchor and (linked.is_dir() or linked.suffix.lower() != ".md"):
                problems.append(f"{where}: an anchor into a file that is not Markdown")
            elif anchor and anchor not in _anchors_cached(linked):
                problems.append(f"{where}: no heading with this anchor")
    return problems


_ANCHORS: dict[Path, set[str]] = {}


def _anchors_cached(path: Path) -> set[str]:
    if path not in _ANCHORS:
        _ANCHORS[path] = anchors(path)
    return _ANCHORS[path]


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    assert path.exists(), f"{path} is missing"
    assert broken_links(path) == []


def test_readme_is_short_and_keeps_the_test_command():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    assert TEST_COMMAND in text


def test_readme_example_report_is_marked_for_refreshing():
    """The example report sits in a fenced block right after the comment that names the command that made it."""
    lines = README.read_text(encoding="utf-8").splitlines()
    marks = [i for i, line in enumerate(lines) if line.startswith("<!-- example-report: ")]
    assert len(marks) == 1
    assert lines[marks[0] + 1].startswith("```")


def test_slug_follows_github():
    assert slug("Trials: `--try-workers`") == "trials---try-workers"
    assert slug("JSON schema `dlprof.report/1`") == "json-schema-dlprofreport1"
    assert slug("Import rules, and the test that enforces them") == "import-rules-and-the-test-that-enforces-them"
    assert slug("Checking the advice: dlprof sweep") == "checking-the-advice-dlprof-sweep"
    assert slug("Clock alignment and overhead") == "clock-alignment-and-overhead"


def test_the_checker_finds_broken_links(tmp_path):
    other = "# Other page\n\n## A section\n\n## A section\n\n## Code: `--x`\n"
    (tmp_path / "other.md").write_text(other, encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Title\n\n"
        "[fine](other.md#a-section) [second](other.md#a-section-1) [code](other.md#code---x) [here](#title) [web](https://x.org)\n"
        "[gone](missing.md) [no such heading](other.md#nowhere) [none here](#other-page)\n"
        "`[in code](missing-too.md)`\n"
        "```\n[in a block](missing-three.md)\n```\n",
        encoding="utf-8",
    )
    problems = broken_links(doc)
    assert problems == [
        "doc.md:4: missing.md: no such file",
        "doc.md:4: other.md#nowhere: no heading with this anchor",
        "doc.md:4: #other-page: no heading with this anchor",
    ]
