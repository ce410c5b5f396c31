"""The streaming reader: a trace read from its file (decoded one event at a time, ``args`` left raw) gives
exactly the TraceRun of the same document built from dicts, malformed events included; gzip in every
shape; one-line errors for what is not a trace; progress on stderr only for slow steps."""

from __future__ import annotations

import copy
import gzip
import json
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA_DIR

from dlprof.core.errors import TraceFormatError
from dlprof.trace import reader
from dlprof.trace.build import build_run
from dlprof.trace.discover import load_run
from dlprof.trace.reader import TOO_DEEP, NotAnEvent, ReadProgress, TraceEvents, read_trace

TRACES = sorted(p for p in DATA_DIR.rglob("*") if p.name.endswith((".json", ".json.gz")) and "golden" not in p.parts)
TINY = DATA_DIR / "tiny_dlprof_trace.json"
CUDA = DATA_DIR / "tiny_cuda_trace.json"


def _dicts(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _same_run(path: Path, document: dict) -> None:
    streamed = load_run(path, "x")
    in_memory = build_run(document, path, "x")
    assert streamed == in_memory
    assert streamed.event_count == len(document["traceEvents"])


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_a_file_gives_the_run_of_its_dicts(path):
    assert TRACES and len(TRACES) >= 8
    document = _dicts(path)
    if isinstance(document, list):  # a bare event array: the reader reads it as the document's events
        document = {"traceEvents": document}
    assert isinstance(document.get("traceEvents"), list), "every test trace is a trace"
    _same_run(path, document)


MUTATIONS = [
    ("ts", "x"),
    ("ts", None),
    ("ts", [1]),
    ("dur", -5),
    ("dur", {"a": 1}),
    ("pid", None),
    ("pid", 1.5),
    ("tid", [1]),
    ("args", "x"),
    ("args", None),
    ("args", [1]),
    ("args", 5),
    ("name", 5),
    ("name", None),
    ("cat", 7),
    ("ph", None),
]


@pytest.mark.parametrize("cat", ["cpu_op", "gpu_memcpy", "kernel", "cuda_runtime", "dlprof", "user_annotation"])
@pytest.mark.parametrize("field,value", MUTATIONS)
def test_a_malformed_event_counts_the_same_from_a_file(tmp_path, cat, field, value):
    source = CUDA if cat in ("gpu_memcpy", "kernel", "cuda_runtime") else TINY
    document = _dicts(source)
    targets = [e for e in document["traceEvents"] if e.get("cat") == cat]
    assert targets, f"no {cat} event in {source.name}"
    targets[0][field] = value
    if len(targets) > 1:
        targets[-1].pop(field, None)  # absent: its default
    document["traceEvents"] += [3, "x", None, [1, 2]]  # not events at all
    path = tmp_path / "t.json"
    path.write_text(json.dumps(document))
    try:
        expected = build_run(copy.deepcopy(document), path, "x")
    except Exception as error:
        with pytest.raises(type(error)):
            load_run(path, "x")
        return
    assert load_run(path, "x") == expected
    assert any("4 with not an object" in p for p in expected.trace_problems)


def test_a_number_beyond_a_double_skips_its_event_not_the_file(tmp_path):
    text = TINY.read_text()
    document = json.loads(text)
    op = next(e for e in document["traceEvents"] if e.get("cat") == "cpu_op")
    op["ts"] = 12345.5
    path = tmp_path / "t.json"
    path.write_text(json.dumps(document).replace("12345.5", "1e400"))
    run = load_run(path, "x")
    assert "1 of 22 trace events skipped as malformed (1 with a number beyond a double)" in run.trace_problems[0]


def test_gzip_members_padding_and_plain_json_read_alike(tmp_path):
    raw = TINY.read_bytes()
    expected = load_run(TINY, "x")
    half = len(raw) // 2
    for name, data in [
        ("one.json.gz", gzip.compress(raw)),
        ("two.json.gz", gzip.compress(raw[:half]) + gzip.compress(raw[half:])),
        ("padded.json.gz", gzip.compress(raw) + b"\0" * 64),
    ]:
        path = tmp_path / name
        path.write_bytes(data)
        assert load_run(path, "x").steps == expected.steps


@pytest.mark.parametrize(
    "data,message",
    [
        (gzip.compress(b'{"traceEvents": []}' * 10)[:-9], "truncated or corrupt gzip"),
        (gzip.compress(b'{"traceEvents": []}') + b"garbage", "truncated or corrupt gzip"),
    ],
)
def test_bad_gzip_is_one_error(tmp_path, data, message):
    path = tmp_path / "t.json.gz"
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match=message):
        read_trace(path)


@pytest.mark.parametrize(
    "text,message",
    [
        ("this is not json", "not JSON"),
        ('{"traceEvents": [1, 2', "not JSON"),
        ('{"traceEvents": [NaN]}', "not JSON"),
        ('{"a": 1e400, "traceEvents": []}', "not JSON"),
        ('"traceEvents"', "without a 'traceEvents' list"),
        ("5", "without a 'traceEvents' list"),
        ('{"hello": 1}', "without a 'traceEvents' list"),
        ('{"traceEvents": {"a": 1}}', "without a 'traceEvents' list"),
    ],
)
def test_what_is_not_a_trace_is_one_error(tmp_path, text, message):
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=message) as error:
        read_trace(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_bare_event_array_and_the_top_level_values_are_read(tmp_path):
    document = _dicts(TINY)
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(document["traceEvents"]))
    bare = read_trace(path)
    assert list(bare) == ["traceEvents"] and isinstance(bare["traceEvents"], TraceEvents)
    assert len(bare["traceEvents"]) == len(document["traceEvents"])
    read = read_trace(TINY)
    assert {k: v for k, v in read.items() if k != "traceEvents"} == {
        k: v for k, v in document.items() if k != "traceEvents"
    }


def _nested(depth: int, kind: str = "list") -> str:
    """JSON text nested ``depth`` levels deep (written as text: ``json.dumps`` itself recurses)."""
    if kind == "list":
        return "[" * depth + "1" + "]" * depth
    return '{"a": ' * depth + "1" + "}" * depth


def _deep_trace(depth: int, where: str) -> str:
    """The tiny trace with a value nested ``depth`` levels deep: the whole document, in an event's ``args``, in an
    event's ``name``, or in the manifest."""
    if where in ("list", "object"):
        return _nested(depth, where)
    document = _dicts(TINY)
    if where == "args":
        event = next(e for e in document["traceEvents"] if e.get("cat") == "cpu_op")
        event["args"]["deep"] = "@DEEP@"
    elif where == "name":
        event = next(e for e in document["traceEvents"] if e.get("cat") == "cpu_op")
        event["name"] = "@DEEP@"
    else:
        document["dlprof"]["clock"] = {"deep": "@DEEP@"}
    return json.dumps(document).replace('"@DEEP@"', _nested(depth))


def _too_deep_error(path: Path) -> str:
    return (
        f"{path}: JSON nested too deep to read (more than Python's recursion limit allows, about"
        f" {sys.getrecursionlimit()} levels; a profiler's trace nests fewer than 10); record the trace again, or give"
        " the file torch.profiler wrote"
    )


@pytest.mark.parametrize("gzipped", [False, True], ids=["json", "gzip"])
@pytest.mark.parametrize("depth", [1_000, 100_000])
@pytest.mark.parametrize("where", ["list", "object", "args", "name", "manifest"])
def test_json_nested_deeper_than_the_parser_follows_is_one_error(tmp_path, where, depth, gzipped):
    """msgspec recurses on Python's stack: at 1,000 levels and beyond, one error naming the file, not a
    RecursionError."""
    text = _deep_trace(depth, where).encode()
    path = tmp_path / ("t.json.gz" if gzipped else "t.json")
    path.write_bytes(gzip.compress(text) if gzipped else text)
    with pytest.raises(TraceFormatError) as error:
        load_run(path, "x")
    assert str(error.value) == _too_deep_error(path)


@pytest.mark.parametrize("where", ["args", "name", "manifest"])
def test_json_nested_hundreds_of_levels_deep_is_read(tmp_path, where):
    """Under the parser's limit, a deep value is read as any other: an event's arguments are read field by field
    (never walked), a deep name skips its event, the manifest's free-form values are bounded by its parser."""
    path = tmp_path / "t.json"
    path.write_text(_deep_trace(500, where))
    run = load_run(path, "x")
    expected = load_run(TINY, "x")
    assert run.steps == expected.steps
    if where == "name":
        assert run.trace_problems[0].startswith("1 of 22 trace events skipped as malformed (1 with 'name' missing")
    elif where == "manifest":
        assert run.manifest.clock == {} and run.manifest_problems == (
            "manifest.clock is nested more than 32 levels deep: read as unknown",
        )
    else:
        assert run.trace_problems == expected.trace_problems and run.manifest == expected.manifest


def test_an_event_nested_deeper_than_the_stack_left_is_skipped_and_counted(tmp_path, monkeypatch):
    """The split follows the whole document; an event decoded a few frames further down the stack may still meet the
    parser's limit (RecursionError): it is skipped and counted, and so are ``args`` decoded further down."""
    document = read_trace(TINY)
    real_event, real_any = reader._EVENT, reader._ANY

    class Limited:
        """A decoder that meets the stack's limit on the values of dlprof's worker spans (their ``args`` are read)."""

        def __init__(self, decoder):
            self.decoder = decoder

        def decode(self, raw):
            if b'"dlprof"' in bytes(raw) or b'"cpu_us"' in bytes(raw):
                raise RecursionError("maximum recursion depth exceeded while deserializing an object")
            return self.decoder.decode(raw)

    monkeypatch.setattr(reader, "_EVENT", Limited(real_event))
    events = list(document["traceEvents"])
    assert [str(e) for e in events if isinstance(e, NotAnEvent)] == [TOO_DEEP] * 10  # 8 spans, 2 memory samples
    monkeypatch.setattr(reader, "_EVENT", real_event)
    document = read_trace(TINY)
    monkeypatch.setattr(reader, "_ANY", Limited(real_any))
    run = build_run(document, TINY, "x")
    assert run.trace_problems == (f"8 of 22 trace events skipped as malformed (8 with 'args' {TOO_DEEP})",)


def test_drained_events_are_gone_and_counted():
    events = read_trace(TINY)["traceEvents"]
    assert len(list(events)) == len(events) == 22  # plain iteration keeps them
    assert len(list(events.drain())) == 22
    assert list(events) == [] and len(events) == 22


def test_progress_shows_only_for_a_slow_step_and_only_on_stderr(capsys):
    with ReadProgress("quick") as progress:
        progress.done("done quickly")
    slow = ReadProgress("reading trace x (1 MB)", after_s=0.05)
    time.sleep(0.3)
    slow.done("parsed 3 events")
    out, err = capsys.readouterr()
    assert out == ""
    assert "quick" not in err
    assert err.startswith("dlprof: reading trace x (1 MB) ... parsed 3 events in ") and err.endswith(" s\n")


#: Per trace in tests/data: count, total duration and mean start of each TraceRun list, as dlprof 0.3.0's
#: reader (orjson into dicts, before the streaming reader) computed them.
SUMMARIES = Path(__file__).with_name("run_summaries.json")


def _summary(run) -> dict:
    out = {}
    for field in (
        "steps",
        "next_calls",
        "host_ops",
        "backward",
        "optimizer",
        "h2d_host",
        "gpu",
        "launches",
        "loader_spans",
        "collectives",
    ):
        spans = getattr(run, field)
        out[field] = [
            len(spans),
            round(sum(s.end_us - s.start_us for s in spans), 3),
            round(sum(s.start_us for s in spans) / max(1, len(spans)), 3),
        ]
    return {
        **out,
        "memory": len(run.memory),
        "main": [run.main_pid, run.main_tid],
        "problems": list(run.trace_problems),
        "events": run.event_count,
    }


def test_every_test_trace_gives_the_numbers_the_dict_reader_gave():
    expected = json.loads(SUMMARIES.read_text())
    assert set(expected) <= {str(p.relative_to(DATA_DIR)) for p in TRACES}
    for name, summary in expected.items():
        assert _summary(load_run(DATA_DIR / name, "x")) == summary, name


def test_make_big_trace_repeats_the_steps_and_the_result_analyses_cleanly(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    try:
        from make_big_trace import make_big_trace
    finally:
        sys.path.pop(0)
    one = load_run(TINY, "x")
    out = tmp_path / "big" / "big.pt.trace.json.gz"
    made = make_big_trace(TINY, out, size_mb=0.05)
    assert made["copies"] > 3 and made["steps"] == made["copies"] * len(one.steps)
    assert len(gzip.decompress(out.read_bytes())) == made["bytes"]
    big = load_run(out, "x")
    assert big.trace_problems == () and big.event_count == made["events"]
    numbers = [s.number for s in big.steps]
    assert numbers == sorted(set(numbers)) and numbers[: len(one.steps)] == [s.number for s in one.steps]
    assert len(big.steps) == made["steps"] and len(big.loader_spans) == made["copies"] * len(one.loader_spans)
    assert len({s.batch for s in big.loader_spans if s.name == "batch"}) == made["copies"] * sum(
        s.name == "batch" for s in one.loader_spans
    )
    assert all(a.end_us <= b.start_us for a, b in zip(big.steps, big.steps[1:]))
