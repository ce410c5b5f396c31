"""Property-based: no input makes ``dlprof analyze`` crash or print an impossible number.

Valid traces (hand-written, with and without dlprof's manifest, and a real ROCm trace from HTA) are
mutated: keys dropped, fields given the wrong type (str, null, list, object, bool, huge, negative,
NaN, Infinity, values nested 40, 1,000 and 100,000 levels deep), events duplicated, the event list truncated,
manifest fields broken, the manifest's numbers given as NaN or infinity (as text, and in memory as numbers), the
whole document nested 1,000 or 100,000 levels deep. Every mutant must either give a report or raise a
:class:`~dlprof.core.errors.DlprofError`; a report must render in every format, its JSON must parse with a strict
parser, no time, size or count in it may be negative or non-finite, and no format may print NaN or infinity.

Two searches: through a file (``dlprof.analyze``, the JSON parser included) and in memory (straight into
``build_run``, so that NaN, Infinity and integers beyond 64 bits, which the parser refuses, reach the
trace's validation too). Each runs once per session, whichever test needs it first, and counts the
inputs it tried and passed; ``test_fuzz_counts`` checks and prints the counts, alone or in any order.
"""

from __future__ import annotations

import copy
import gzip
import html
import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import DATA_DIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlprof
from dlprof.core import schema
from dlprof.core.errors import DlprofError, TraceFormatError
from dlprof.report import FORMATS, renderer
from dlprof.results.report import Report
from dlprof.trace.build import build_run
from dlprof.trace.reader import parse_trace
from dlprof.workflows.analyze import analyze_run

BASES = {
    "tiny_dlprof": DATA_DIR / "tiny_dlprof_trace.json",
    "tiny_cuda": DATA_DIR / "tiny_cuda_trace.json",
    "hta_rocm": DATA_DIR / "hta_rocm_mi250_minitoy.json.gz",
}
#: Examples per test: the file runs in ~30 s on 2 cores; derandomized, so CI tries the same inputs each time.
MAX_EXAMPLES = 600
#: At least this many inputs must have been tried by the two searches together (hypothesis drops repeats).
MIN_TRIED = MAX_EXAMPLES
FUZZ_SETTINGS = settings(
    max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)

#: Keys whose numbers may legitimately be negative: the main process's worker id (-1), the profiler's
#: overhead and memory growth (they can shrink), a rank's data wait beyond the others' median.
SIGNED_KEYS = frozenset(
    {"worker", "overhead_pct", "pss_growth_mib_per_min", "extra_data_wait_ms", "speed_change_pct", "delta", "delta_pct"}
)

#: How Python (and JavaScript) print a non-finite float: never in a report, not even where a problem names the bad
#: value.
NOT_A_NUMBER = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?!\w)", re.IGNORECASE)


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


DOCUMENTS = {name: _load(path) for name, path in BASES.items()}

EVENT_FIELDS = ["ts", "dur", "pid", "tid", "args", "name", "cat", "ph"]
ARG_FIELDS = [
    schema.ARG_CPU_US,
    schema.ARG_RUNQ_US,
    schema.ARG_TENSORS,
    schema.ARG_WORKER,
    schema.ARG_BATCH,
    schema.ARG_LOADER,
    "bytes",
    "stream",
    "correlation",
    "uss_mib",
    "pss_mib",
    "name",
]
MANIFEST_PATHS = [
    ("loader",),
    ("loaders",),
    ("host",),
    ("loader", "num_workers"),
    ("loader", "batch_size"),
    ("loader", "prefetch_factor"),
    ("loader", "epochs"),
    ("loader", "length"),
    ("host", "usable_cores"),
    ("host", "ram_total_mib"),
    ("host", "ram_available_mib"),
    ("host", "handoff"),
    ("host", "handoff", "per_batch_ms"),
    ("host", "handoff", "per_tensor_ms"),
    ("host", "worker_startup"),
    ("host", "gpu"),
    ("memory",),
    ("memory", "processes"),
    ("versions",),
    ("step_clock",),
    ("step_clock", "wall_ms"),
    ("main_process_cpu",),
    ("main_process_cpu", "cpu_ms_per_step"),
    ("workers",),
    ("manifest_version",),
    ("status",),
]
TOP_LEVEL = ["distributedInfo", "baseTimeNanoseconds", schema.MANIFEST_KEY, "traceEvents"]
#: Numbers of the manifest (and entries of its lists), given NaN or infinity: never printed (tests/test_manifest.py
#: gives it to every numeric field).
NUMERIC_MANIFEST_PATHS = [
    ("manifest_version",),
    ("rank",),
    ("world_size",),
    ("exit_code",),
    ("span_records_skipped",),
    ("steps", "run"),
    ("steps", "recorded"),
    ("schedule", "wait"),
    ("schedule", "active"),
    ("main_process_cpu", "steps"),
    ("main_process_cpu", "wall_ms_per_step"),
    ("loader", "num_workers"),
    ("loader", "batch_size"),
    ("loader", "length"),
    ("loader", "epochs", 0, "first_batch_ms"),
    ("host", "usable_cores"),
    ("host", "cpu_count"),
    ("host", "ram_available_mib"),
    ("host", "handoff", "per_batch_ms"),
    ("host", "worker_startup", "per_worker_ms"),
    ("memory", "interval_ms"),
    ("step_clock", "wall_ms", 0),
    ("step_clock", "wait_ms", 3),
    ("workers", 0, "start_ns"),
]
#: NaN and infinity as a trace can hold them (JSON has no NaN: text), and in memory as ``json.loads`` returns them.
NON_FINITE_TEXT = ["NaN", "Infinity", "-Infinity", "nan", "-inf"]
NON_FINITE_NUMBERS = [math.nan, math.inf, -math.inf]


@dataclass(frozen=True)
class Deep:
    """A value nested ``depth`` levels deep: written into a file as text (``json.dumps`` recurses, and so would
    hypothesis's report of a failing example), built without recursion for the search in memory."""

    depth: int

    def text(self) -> str:
        return "[" * self.depth + "]" * self.depth

    def value(self) -> list:
        nested: list = []
        for _ in range(self.depth - 1):
            nested = [nested]
        return nested


#: Within the parser's reach (but past the manifest's bound of 32 levels), at Python's recursion limit, far past it.
DEEP = [Deep(40), Deep(1_000), Deep(100_000)]

#: Values of the wrong type or impossible: JSON-representable ones, and (in memory only) those the parser refuses.
JSON_BAD = [
    "x",
    "",
    None,
    [],
    [1, 2],
    {},
    {"a": 1},
    True,
    False,
    0,
    -1,
    -1e9,
    1e308,
    2**63,
    -(2**63),
    0.5,
    1e-320,
    "123",
]
MEMORY_BAD = [*NON_FINITE_NUMBERS, 10**400]


def _bad_values(in_memory: bool):
    return st.sampled_from(JSON_BAD + DEEP + (MEMORY_BAD if in_memory else []))


@st.composite
def mutation(draw, in_memory: bool):
    kinds = ["event_field", "event_field", "args_field", "drop_key", "duplicate", "truncate", "manifest", "top_level"]
    kinds += ["manifest_number"] + ([] if in_memory else ["deep_document"])  # a document is a dict in memory
    kind = draw(st.sampled_from(kinds))
    bad = _bad_values(in_memory)
    if kind in ("event_field", "args_field", "drop_key", "duplicate"):
        index = draw(st.integers(min_value=0, max_value=10**6))
        if kind == "event_field":
            return kind, index, draw(st.sampled_from(EVENT_FIELDS)), draw(bad)
        if kind == "args_field":
            return kind, index, draw(st.sampled_from(ARG_FIELDS)), draw(bad)
        if kind == "drop_key":
            return kind, index, draw(st.sampled_from(EVENT_FIELDS)), None
        return kind, index, draw(st.integers(min_value=1, max_value=3)), None
    if kind == "truncate":
        return kind, draw(st.floats(min_value=0, max_value=1)), None, None
    if kind == "manifest":
        return kind, draw(st.sampled_from(MANIFEST_PATHS)), None, draw(bad)
    if kind == "manifest_number":
        values = NON_FINITE_TEXT + (NON_FINITE_NUMBERS if in_memory else [])
        return "manifest", draw(st.sampled_from(NUMERIC_MANIFEST_PATHS)), None, draw(st.sampled_from(values))
    if kind == "deep_document":
        return kind, None, None, draw(st.sampled_from(DEEP[1:]))
    return kind, draw(st.sampled_from(TOP_LEVEL)), None, draw(bad)


def _apply(document: dict, change: tuple) -> None:
    kind, where, what, value = change
    value = copy.deepcopy(value)  # the strategies' lists and objects are shared between examples
    events = document.get("traceEvents")
    if kind in ("event_field", "args_field", "drop_key", "duplicate"):
        if not isinstance(events, list) or not events:
            return
        i = where % len(events)
        event = events[i]
        if not isinstance(event, dict):
            return
        if kind == "event_field":
            event[what] = value
        elif kind == "args_field":
            args = event.get("args")
            if isinstance(args, dict):
                args[what] = value
        elif kind == "drop_key":
            event.pop(what, None)
        else:
            events[i + 1 : i + 1] = [copy.deepcopy(event) for _ in range(what)]
    elif kind == "truncate":
        if isinstance(events, list):
            del events[int(len(events) * where) :]
    elif kind == "manifest":
        node = document.get(schema.MANIFEST_KEY)
        for key in where[:-1]:
            node = _child(node, key)
        if isinstance(node, dict) or _child(node, where[-1]) is not None:
            node[where[-1]] = value
    elif kind == "top_level":
        document[where] = value
    # "deep_document" replaces the whole file: _write does it.


def _child(node, key):
    """``node[key]`` of a manifest's object or list, None when there is none."""
    if isinstance(node, dict):
        return node.get(key)
    return node[key] if isinstance(node, list) and isinstance(key, int) and key < len(node) else None


def _dumps(document) -> str:
    """The document as JSON, each :class:`Deep` written out as text."""
    deep = {f'"@deep-{d.depth}@"': d.text() for d in DEEP}
    text = json.dumps(document, default=lambda value: f"@deep-{value.depth}@")
    for placeholder, nested in deep.items():
        text = text.replace(placeholder, nested)
    return text


def _materialize(document: dict) -> dict:
    """The document in memory, each :class:`Deep` built (the mutations put them at most a few levels down)."""
    stack = [document]
    while stack:
        node = stack.pop()
        for key, value in node.items() if isinstance(node, dict) else enumerate(node):
            if type(value) is Deep:
                node[key] = value.value()
            elif isinstance(value, (dict, list)):
                stack.append(value)
    return document


def _strict_loads(text: str):
    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def _check_numbers(node, key: str = "") -> None:
    """No non-finite number anywhere; no negative one but under SIGNED_KEYS."""
    if isinstance(node, dict):
        for k, v in node.items():
            _check_numbers(v, k)
    elif isinstance(node, list):
        for v in node:
            _check_numbers(v, key)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        assert math.isfinite(node), f"{key} = {node}"
        assert node >= 0 or key in SIGNED_KEYS, f"{key} = {node}"


def check_report(report: Report) -> None:
    """Every renderer works; the JSON is strict, and holds no impossible number."""
    for fmt in FORMATS:
        text = renderer(Report, fmt)(report)
        assert isinstance(text, str) and text
        if fmt == "json":
            _check_numbers(_strict_loads(text))
            json.dumps(_strict_loads(text), allow_nan=False)
        else:
            found = NOT_A_NUMBER.search(html.unescape(text) if fmt == "html" else text)
            assert found is None, f"{fmt}: {found.group(0)!r} in the report"


def _outcome(counts: dict[str, int], produce) -> None:
    counts["tried"] += 1
    try:
        report = produce()
    except DlprofError as error:
        message = str(error)
        assert message and "\n" not in message
        counts["errors"] += 1
        return
    check_report(report)
    counts["reports"] += 1


@FUZZ_SETTINGS
@given(base=st.sampled_from(sorted(BASES)), changes=st.lists(mutation(in_memory=False), min_size=1, max_size=4))
def _search_files(tmp_path_factory, counts, base, changes):
    """A mutant written to a file, analysed as a user would: a report or one error."""
    document = copy.deepcopy(DOCUMENTS[base])
    for change in changes:
        _apply(document, change)
    path = tmp_path_factory.mktemp("fuzz") / "mutant.json"
    whole = [value for kind, _, _, value in changes if kind == "deep_document"]
    path.write_text(whole[-1].text() if whole else _dumps(document))
    _outcome(counts, lambda: dlprof.analyze(path))


@FUZZ_SETTINGS
@given(base=st.sampled_from(sorted(BASES)), changes=st.lists(mutation(in_memory=True), min_size=1, max_size=4))
def _search_in_memory(tmp_path_factory, counts, base, changes):
    """A mutant handed to ``build_run`` as it is (values no JSON file holds included): a report or one error."""
    document = copy.deepcopy(DOCUMENTS[base])
    for change in changes:
        _apply(document, change)
    if not isinstance(document.get("traceEvents"), (list, Deep)):
        # Never reaches build_run: the reader refuses it (and the search through files analyses what it reads).
        with pytest.raises(TraceFormatError):
            parse_trace(BASES[base], _dumps(document).encode())
        return
    _outcome(counts, lambda: Report([analyze_run(build_run(_materialize(document), BASES[base], base))]))


#: The counts of each search that has run in this session (a search that failed has none, and runs again).
SEARCH_COUNTS: dict[str, dict[str, int]] = {}


def _search(search, tmp_path_factory) -> dict[str, int]:
    """Run ``search`` (once per session): how many inputs it tried, and how many gave a report or one error."""
    name = search.__name__
    if name not in SEARCH_COUNTS:
        counts = {"tried": 0, "reports": 0, "errors": 0}
        search(tmp_path_factory, counts)
        SEARCH_COUNTS[name] = counts
    return SEARCH_COUNTS[name]


def test_mutated_trace_file_gives_a_report_or_one_error(tmp_path_factory):
    """The search through files, unless a test ran it already in this session (then its examples all passed)."""
    assert _search(_search_files, tmp_path_factory)["tried"] > 0


def test_mutated_trace_in_memory_gives_a_report_or_one_error(tmp_path_factory):
    """The search in memory, unless a test ran it already in this session (then its examples all passed)."""
    assert _search(_search_in_memory, tmp_path_factory)["tried"] > 0


def test_fuzz_counts(tmp_path_factory):
    """How many inputs the two searches tried, and that every one passed (the searches run here if no test ran them
    yet)."""
    counts = {
        key: sum(_search(search, tmp_path_factory)[key] for search in (_search_files, _search_in_memory))
        for key in ("tried", "reports", "errors")
    }
    message = (
        f"fuzz: {counts['tried']} inputs tried, {counts['reports'] + counts['errors']} passed ({counts['reports']}"
        f" reports, {counts['errors']} one-line errors)"
    )
    print(message)
    warnings.warn(UserWarning(message), stacklevel=1)
    assert counts["tried"] >= MIN_TRIED and counts["reports"] + counts["errors"] == counts["tried"]
    assert counts["reports"] > counts["tried"] // 4  # most mutants still make a report: the fuzz reaches the analysis
