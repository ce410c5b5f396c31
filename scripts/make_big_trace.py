"""Build a big, realistic trace from a real one: its steps repeated end to end until the JSON has a chosen size.

    python scripts/make_big_trace.py TRACE OUT --size-mb 1000

TRACE is a trace file (``.json`` or ``.json.gz``) or a run directory holding one, e.g. one recorded with
``python -m dlprof record --out /tmp/x --name base`` (the built-in workload, ~25 s). OUT is written as
gzip when it ends in ``.gz``, else as plain JSON. ``--size-mb`` is the size of the uncompressed JSON in MB
(10^6 bytes), the size a reader has to parse.

Each copy of the trace's timed events (``ph`` X, C, i, s, f) is shifted in time to start 1 ms after the
previous copy ends; ProfilerStep numbers continue, dlprof's (loader, epoch, batch) keys stay unique (the
epoch grows by 1000 per copy), and correlation and flow ids are shifted so that each copy's launches
match only its own GPU activity. Metadata events (process names) and the top-level keys (manifest,
``distributedInfo``, ``baseTimeNanoseconds``) are kept once. The events are written as dlprof writes a
merged trace (compact JSON, ``distributedInfo`` first with a space after the colons, as HTA reads the
rank); one copy is held in memory at a time, so building a 1 GB trace needs well under 1 GB.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import orjson

from dlprof.capture import merge
from dlprof.core import schema

TIMED_PHASES = ("X", "C", "i", "s", "f")
STEP_PREFIX = "ProfilerStep#"
ARG_EPOCH = schema.ARG_EPOCH  # dlprof's (loader, epoch, batch) key
#: Gap between two copies (µs).
GAP_US = 1000.0


def _load(trace: Path) -> dict:
    if trace.is_dir():
        files = sorted(p for p in trace.iterdir() if p.name.endswith((".json", ".json.gz")))
        if not files:
            raise SystemExit(f"{trace}: no .json or .json.gz trace in it")
        trace = files[0]
    raw = trace.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    document = orjson.loads(raw)
    if isinstance(document, list):
        document = {"traceEvents": document}
    return document


def _head(document: dict) -> bytes:
    """Everything but the events, as dlprof's merge writes it, up to the opening of ``traceEvents``."""
    without_events = merge.dumps_trace({**{k: v for k, v in document.items() if k != "traceEvents"}, "traceEvents": []})
    return without_events[: -len(b"]}")]  # ... "traceEvents":[


def _max_id(events: list[dict], key: str, in_args: bool) -> int:
    values = [(e.get("args") if in_args else e) for e in events]
    ids = [v.get(key) for v in values if isinstance(v, dict)]
    return max((i for i in ids if isinstance(i, int) and not isinstance(i, bool)), default=0)


def _copy(events: list[dict], k: int, shift_us: float, steps: int, correlation_step: int, flow_step: int) -> list[dict]:
    """The ``k``-th copy of the timed events (k = 0 is the original)."""
    if k == 0:
        return events
    out = []
    for event in events:
        clone = dict(event)
        clone["ts"] = event["ts"] + k * shift_us
        name = clone.get("name")
        if isinstance(name, str) and name.startswith(STEP_PREFIX) and name[len(STEP_PREFIX) :].isdigit():
            clone["name"] = f"{STEP_PREFIX}{int(name[len(STEP_PREFIX) :]) + k * steps}"
        if isinstance(clone.get("id"), int):
            clone["id"] = clone["id"] + k * flow_step
        args = clone.get("args")
        if isinstance(args, dict) and (ARG_EPOCH in args or isinstance(args.get("correlation"), int)):
            args = clone["args"] = dict(args)
            if isinstance(args.get(ARG_EPOCH), int):
                args[ARG_EPOCH] += 1000 * k  # keep (loader, epoch, batch) unique
            if isinstance(args.get("correlation"), int):
                args["correlation"] += k * correlation_step
        out.append(clone)
    return out


def make_big_trace(trace: Path, out: Path, size_mb: float) -> dict:
    """Write ``out``: ``trace``'s timed events repeated until the uncompressed JSON is about ``size_mb`` MB.

    Returns:
        ``{"bytes": uncompressed size, "events": event count, "steps": ProfilerStep count, "copies": n}``.
    """
    document = _load(trace)
    events = document["traceEvents"]
    timed = [
        e
        for e in events
        if isinstance(e, dict) and e.get("ph") in TIMED_PHASES and isinstance(e.get("ts"), (int, float))
    ]
    untimed = [
        e
        for e in events
        if not (isinstance(e, dict) and e.get("ph") in TIMED_PHASES and isinstance(e.get("ts"), (int, float)))
    ]
    if not timed:
        raise SystemExit(f"{trace}: no timed events to repeat")
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + (e.get("dur") if isinstance(e.get("dur"), (int, float)) else 0) for e in timed)
    shift_us = end - start + GAP_US
    steps = sum(1 for e in timed if e.get("ph") == "X" and str(e.get("name", "")).startswith(STEP_PREFIX))
    correlation_step = _max_id(timed, "correlation", True) + 1
    flow_step = _max_id(timed, "id", False) + 1
    head = _head(document)
    first = orjson.dumps(untimed + timed)[1:-1]
    one_copy = len(orjson.dumps(timed)) - 1  # without the brackets, with a separating comma
    copies = 1 + max(0, round((size_mb * 1e6 - len(head) - len(first) - 2) / one_copy))
    written = 0
    opener = gzip.open if out.name.endswith(".gz") else open
    out.parent.mkdir(parents=True, exist_ok=True)
    with opener(out, "wb", **({"compresslevel": 1} if opener is gzip.open else {})) as f:
        for chunk in (head, first):
            written += f.write(chunk)
        for k in range(1, copies):
            written += f.write(b"," + orjson.dumps(_copy(timed, k, shift_us, steps, correlation_step, flow_step))[1:-1])
        written += f.write(b"]}")
    return {"bytes": written, "events": len(untimed) + copies * len(timed), "steps": steps * copies, "copies": copies}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path, help="a real trace (.json/.json.gz) or a run directory holding one")
    parser.add_argument("out", type=Path, help="where to write the big trace (.json.gz: gzip, else plain JSON)")
    parser.add_argument("--size-mb", type=float, default=100, help="uncompressed JSON size in MB (default 100)")
    args = parser.parse_args(argv)
    made = make_big_trace(args.trace, args.out, args.size_mb)
    print(
        f"{args.out}: {made['bytes'] / 1e6:.0f} MB of JSON, {made['events']} events, {made['steps']} steps "
        f"({made['copies']} copies), {args.out.stat().st_size / 1e6:.0f} MB on disk",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
