"""dlprof's version moves with the formats it writes: a change of the manifest's version or of a JSON schema without a
new version, a row in :data:`HISTORY` and an entry in CHANGELOG.md fails here.

Each check is a function of plain values, tested below on inputs that break it, so that a check that could never fail
would fail here.
"""

from __future__ import annotations

import re
from pathlib import Path

import dlprof
from dlprof.core import manifest, schema, version
from dlprof.results import diff, report, sweep

CHANGELOG = Path(__file__).resolve().parents[1] / "CHANGELOG.md"

#: Every version and the formats it writes (a format it did not write yet is absent). A released row never changes:
#: a format that changes gets a new version, its row here and its CHANGELOG entry.
HISTORY: dict[str, dict[str, int | str]] = {
    "0.1.0": {"manifest": 1, "report": "dlprof.report/1"},
    "0.2.0": {"manifest": 2, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.3.0": {"manifest": 4, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.4.0": {"manifest": 4, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.5.0": {"manifest": 5, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.6.0": {"manifest": 6, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.7.0": {"manifest": 7, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.8.0": {"manifest": 8, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.8.1": {"manifest": 8, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.8.2": {"manifest": 8, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.8.3": {"manifest": 8, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.8.4": {"manifest": 8, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.8.5": {"manifest": 8, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.8.6": {"manifest": 8, "report": "dlprof.report/1", "sweep": "dlprof.sweep/1", "diff": "dlprof.diff/1"},
    "0.9.0": {
        "manifest": 8,
        "report": "dlprof.report/1",
        "sweep": "dlprof.sweep/1",
        "diff": "dlprof.diff/1",
        "plain_launch": "dlprof.plain_launch/1",
    },
}

_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\]", re.MULTILINE)
_MANIFEST = re.compile(r"manifest v(\d+)")
_SCHEMA = re.compile(r"`(dlprof\.(\w+)/\d+)`")


def version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def changelog_entries(text: str) -> list[tuple[str, dict[str, int | str] | None]]:
    """The versions of a Keep a Changelog file, newest first, each with the formats its ``Formats:`` line names (None
    where it has none); an ``[Unreleased]`` section is left out."""
    headings = list(_HEADING.finditer(text))
    entries: list[tuple[str, dict[str, int | str] | None]] = []
    for heading, following in zip(headings, [*headings[1:], None]):
        if heading["version"].lower() == "unreleased":
            continue
        body = text[heading.end() : following.start() if following else len(text)]
        line = next((ln for ln in body.splitlines() if ln.startswith("Formats:")), None)
        formats: dict[str, int | str] | None = None
        if line is not None:
            formats = {kind: name for name, kind in _SCHEMA.findall(line)}
            if found := _MANIFEST.search(line):
                formats["manifest"] = int(found[1])
        entries.append((heading["version"], formats))
    return entries


def version_problems(
    current: str, formats: dict[str, int | str], history: dict[str, dict[str, int | str]], changelog: str
) -> list[str]:
    """What keeps ``current`` from naming the ``formats`` it writes: the table's newest row, its formats, and the
    changelog's entries (newest first, one per row, each naming its row's formats)."""
    problems = []
    versions = sorted(history, key=version_key)
    if versions[-1] != current:
        problems.append(f"dlprof is {current} but the newest version in HISTORY is {versions[-1]}")
    if history.get(current) != formats:
        problems.append(
            f"dlprof {current} writes {formats}, HISTORY says {history.get(current)}: a format changed, so move"
            " __version__ in dlprof/core/version.py, add its row to HISTORY and its entry to CHANGELOG.md"
        )
    entries = changelog_entries(changelog)
    if not entries or entries[0][0] != current:
        problems.append(f"CHANGELOG.md's newest entry is {entries[0][0] if entries else None}, not {current}")
    if [v for v, _ in entries] != versions[::-1]:
        problems.append(f"CHANGELOG.md has {[v for v, _ in entries]}, HISTORY (newest first) {versions[::-1]}")
    for entry_version, entry_formats in entries:
        if entry_version in history and entry_formats != history[entry_version]:
            problems.append(
                f"CHANGELOG.md's {entry_version} names the formats {entry_formats}, HISTORY {history[entry_version]}"
            )
    return problems


# --- the checks on dlprof as it is ------------------------------------------------------------------


def test_the_version_names_the_formats_it_writes():
    assert version_problems(version.__version__, version.FORMATS, HISTORY, CHANGELOG.read_text("utf-8")) == []


def test_the_writers_take_their_formats_from_the_version_module():
    assert dlprof.__version__ == version.__version__
    written = {"manifest": manifest.MANIFEST_VERSION, "report": report.SCHEMA, "sweep": sweep.SCHEMA}
    written["diff"] = diff.SCHEMA
    written["plain_launch"] = schema.PLAIN_LAUNCH_SCHEMA
    assert written == version.FORMATS


# --- the checks can fail ----------------------------------------------------------------------------

_LOG = """# Changelog

## [Unreleased]

## [0.2.0] - 2026-01-02

Formats: manifest v2, `dlprof.report/1`.

## [0.1.0] - 2026-01-01

Formats: manifest v1, `dlprof.report/1`.
"""
_TABLE: dict[str, dict[str, int | str]] = {
    "0.1.0": {"manifest": 1, "report": "dlprof.report/1"},
    "0.2.0": {"manifest": 2, "report": "dlprof.report/1"},
}
_NOW = {"manifest": 2, "report": "dlprof.report/1"}


def test_changelog_entries_are_read_newest_first_with_their_formats():
    assert changelog_entries(_LOG) == [
        ("0.2.0", {"manifest": 2, "report": "dlprof.report/1"}),
        ("0.1.0", {"manifest": 1, "report": "dlprof.report/1"}),
    ]
    assert changelog_entries("## [1.0.0]\n\nNo formats line.\n") == [("1.0.0", None)]


def test_a_consistent_history_passes():
    assert version_problems("0.2.0", _NOW, _TABLE, _LOG) == []


def test_a_format_changed_without_a_new_version_fails():
    problems = version_problems("0.2.0", {**_NOW, "report": "dlprof.report/2"}, _TABLE, _LOG)
    assert len(problems) == 1 and "a format changed" in problems[0]


def test_a_new_version_without_its_row_or_entry_fails():
    problems = version_problems("0.3.0", _NOW, _TABLE, _LOG)
    assert any("newest version in HISTORY is 0.2.0" in p for p in problems)
    assert any("newest entry is 0.2.0, not 0.3.0" in p for p in problems)


def test_a_row_without_its_changelog_entry_fails():
    table = {**_TABLE, "0.3.0": {**_NOW, "manifest": 3}}
    problems = version_problems("0.3.0", {**_NOW, "manifest": 3}, table, _LOG)
    assert any("newest entry is 0.2.0, not 0.3.0" in p for p in problems)


def test_a_row_edited_without_its_changelog_entry_fails():
    table = {**_TABLE, "0.2.0": {**_NOW, "manifest": 3}}
    problems = version_problems("0.2.0", {**_NOW, "manifest": 3}, table, _LOG)
    assert len(problems) == 1 and problems[0].startswith("CHANGELOG.md's 0.2.0 names the formats")


def test_a_changelog_out_of_order_fails():
    swapped = _LOG.replace("[0.2.0]", "[x]").replace("[0.1.0]", "[0.2.0]").replace("[x]", "[0.1.0]")
    assert version_problems("0.2.0", _NOW, _TABLE, swapped)
