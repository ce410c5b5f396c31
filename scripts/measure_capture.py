"""Measure what `dlprof record` promises: clock alignment and the cost of the DataLoader spans.

    python scripts/measure_capture.py            # ~2-3 minutes on 2 cores
    python scripts/measure_capture.py --quick    # fewer repeats

Prints a Markdown report (the numbers in docs/recording.md come from it):

1. Clock alignment. Kineto event times (``baseTimeNanoseconds + ts``) against ``time.time_ns()``
   read just before and just after ``record_function`` regions: how far apart the two clocks can be.
   Then, in real ``dlprof record`` runs, the margin between each batch's last worker span and the end
   of the ``__next__`` that returned it (must be >= 0), and the manifest's own alignment statistics.
2. Cost per span: a DataLoader over a trivial dataset with and without the probe, and tokenizer
   calls with and without it, side by side in one process, medians of alternating repeats.
3. Cost per step of the default workload: the spans a step records times the cost per span,
   against the measured step time; plus an A/B of whole runs (--loader-spans vs --no-loader-spans),
   which on a 2-core machine is dominated by noise, and is printed with its spread for that reason.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlprof.core import schema  # noqa: E402

ALIGNMENT_SCRIPT = r"""
import json, sys, time, torch
from torch.autograd.profiler import record_function
marks = []
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    for i in range(int(sys.argv[2])):
        t0 = time.time_ns()
        with record_function("mark"):
            x = i * 2
        t1 = time.time_ns()
        marks.append((t0, t1))
        time.sleep(0.0005)
prof.export_chrome_trace(sys.argv[1])
json.dump(marks, open(sys.argv[1] + ".marks", "w"))
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def measure_clock_alignment(count: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        subprocess.run([sys.executable, "-c", ALIGNMENT_SCRIPT, path, str(count)], check=True, capture_output=True)
        with open(path) as f:
            trace = json.load(f)
        with open(path + ".marks") as f:
            marks = json.load(f)
    base = trace["baseTimeNanoseconds"]
    events = sorted(
        (e for e in trace["traceEvents"] if e.get("name") == "mark" and e.get("ph") == "X"), key=lambda e: e["ts"]
    )
    start_us, end_us = [], []
    for (t0, t1), event in zip(marks, events):
        start = base + round(event["ts"] * 1000)
        end = start + round(event["dur"] * 1000)
        start_us.append((start - t0) / 1000)
        end_us.append((t1 - end) / 1000)
    return {
        "regions": len(events),
        # A clock offset d (Kineto minus time_ns) must satisfy -min(end) <= d <= min(start).
        "offset_bound_us": [-min(end_us), min(start_us)],
        "kineto_start_after_time_ns_us": {
            "median": statistics.median(start_us),
            "p99": percentile(start_us, 0.99),
            "min": min(start_us),
            "max": max(start_us),
        },
        "time_ns_after_kineto_end_us": {
            "median": statistics.median(end_us),
            "p99": percentile(end_us, 0.99),
            "min": min(end_us),
            "max": max(end_us),
        },
    }


def record(out: Path, name: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "dlprof", "record", "--out", str(out), "--name", name, *args],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"dlprof record failed:\n{done.stderr}")
    (trace,) = (out / name).glob("*" + schema.TRACE_SUFFIX)
    with gzip.open(trace, "rt") as f:
        return json.load(f)


def batch_margins_us(doc: dict) -> list[float]:
    """For each traced __next__: its end minus the end of the last span of the batch it returned."""
    ends: dict[tuple, float] = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == schema.CATEGORY and e.get("ph") == "X":
            key = tuple(e["args"][k] for k in (schema.ARG_LOADER, schema.ARG_EPOCH, schema.ARG_BATCH))
            ends[key] = max(ends.get(key, float("-inf")), e["ts"] + e["dur"])
    margins = []
    for e in doc["traceEvents"]:
        if (
            e.get("ph") == "X"
            and schema.is_dataloader_next(e.get("name", ""))
            and schema.ARG_BATCH in e.get("args", {})
        ):
            key = tuple(e["args"][k] for k in (schema.ARG_LOADER, schema.ARG_EPOCH, schema.ARG_BATCH))
            if key in ends:
                margins.append(e["ts"] + e["dur"] - ends[key])
    return margins


def step_ms(doc: dict) -> list[float]:
    return [
        e["dur"] / 1000
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")
    ]


def spans_per_step(doc: dict) -> float:
    spans = sum(1 for e in doc["traceEvents"] if e.get("cat") == schema.CATEGORY and e.get("ph") == "X")
    return spans / max(1, len(step_ms(doc)))


def measure_span_cost(repeats: int, batches: int) -> dict:
    """µs added per batch (3 spans: batch, fetch, collate) and per tokenizer call, probe on vs off.

    Each figure is the median over ``repeats`` alternating runs, with and without the probe, in this
    one process.
    """
    import timeit

    import torch
    from torch.utils.data import DataLoader
    from transformers import PreTrainedTokenizerFast

    from dlprof.capture import probe
    from dlprof.capture.probe import timing
    from dlprof.workloads.lora import DEFAULT_TOKENIZER

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(DEFAULT_TOKENIZER))

    class Trivial(torch.utils.data.Dataset):
        def __len__(self):
            return batches

        def __getitem__(self, index):
            return index

    def per_batch_us() -> float:
        loader = DataLoader(Trivial(), batch_size=1, collate_fn=lambda items: items)
        start = time.perf_counter_ns()
        for _ in loader:
            pass
        return (time.perf_counter_ns() - start) / 1000 / batches

    def per_tokenizer_call_us() -> float:
        call = lambda: tokenizer("a short sentence to tokenize", add_special_tokens=False)
        return timeit.timeit(call, number=batches) / batches * 1e6

    off_batch, on_batch, off_tok, on_tok = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            off_batch.append(per_batch_us())
            off_tok.append(per_tokenizer_call_us())
            probe.install(tmp)
            timing.install_tokenizer_patches()
            on_batch.append(per_batch_us())
            state = timing.STATE  # as inside a fetch: the tokenizer call is recorded
            state.in_loader, state.ctx = True, timing.LoaderContext(tmp, 0, 0)
            on_tok.append(per_tokenizer_call_us())
            state.log.flush()  # the write is part of the cost
            probe.uninstall()
    added_batch = statistics.median(on_batch) - statistics.median(off_batch)
    return {
        "per_batch_us_without_probe": round(statistics.median(off_batch), 2),
        "per_batch_us_with_probe": round(statistics.median(on_batch), 2),
        "added_per_batch_us": round(added_batch, 2),
        "added_per_span_us": round(added_batch / 3, 2),
        "tokenizer_call_us": round(statistics.median(off_tok), 2),
        "added_per_tokenizer_call_us": round(statistics.median(on_tok) - statistics.median(off_tok), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (for a smoke run)")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3

    results: dict = {"clock": measure_clock_alignment(500 if args.quick else 2000)}
    results["span_cost"] = measure_span_cost(repeats=3 if args.quick else 7, batches=2000)

    margins, on_steps, off_steps, manifests, spans_step = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for i in range(repeats):
            for workers in ("0", "2"):
                doc = record(out, f"align-w{workers}-{i}", "--num-workers", workers)
                margins += batch_margins_us(doc)
                manifests.append(doc[schema.MANIFEST_KEY]["clock"]["alignment"])
                if workers == "2":
                    on_steps.append(statistics.median(step_ms(doc)))
                    spans_step.append(spans_per_step(doc))
            off = record(out, f"nospans-{i}", "--num-workers", "2", "--no-loader-spans")
            off_steps.append(statistics.median(step_ms(off)))
    results["batch_ready_margin_us"] = {
        "count": len(margins),
        "min": min(margins),
        "median": statistics.median(margins),
    }
    results["manifest_alignment"] = {
        "max_offset_us": max(m["max_offset_us"] for m in manifests),
        "offset_bound_us": [
            -min(m["end_slack_us"]["min"] for m in manifests),
            min(m["start_slack_us"]["min"] for m in manifests),
        ],
    }
    step_on, step_off = statistics.median(on_steps), statistics.median(off_steps)
    per_span = results["span_cost"]["added_per_span_us"]
    spans = statistics.median(spans_step)
    results["workload"] = {
        "step_ms_with_spans": [round(v, 2) for v in on_steps],
        "step_ms_without_spans": [round(v, 2) for v in off_steps],
        "spans_per_step": spans,
        "estimated_overhead_pct": round(100 * spans * per_span / 1000 / step_on, 3),
        "ab_overhead_pct": round(100 * (step_on - step_off) / step_off, 2),
    }

    c, s, w = results["clock"], results["span_cost"], results["workload"]
    print("## dlprof record: alignment and overhead\n")
    print("| measurement | value | target |\n|---|---|---|")
    bound = c["offset_bound_us"]
    print(
        f"| Kineto clock vs time.time_ns(): offset bound from {c['regions']} record_function regions | {bound[0]:+.1f}"
        f" µs to {bound[1]:+.1f} µs | within ±1000 µs |"
    )
    print(
        "| Kineto event start − time_ns() read just before (instrumentation delay) | median"
        f" {c['kineto_start_after_time_ns_us']['median']:.1f} µs, p99 {c['kineto_start_after_time_ns_us']['p99']:.1f}"
        " µs | |"
    )
    m = results["manifest_alignment"]
    print(
        f"| dlprof record runs: offset bound from matched `__next__` events | {m['offset_bound_us'][0]:+.1f} µs to"
        f" {m['offset_bound_us'][1]:+.1f} µs (max offset seen: {m['max_offset_us']} µs) | within ±1000 µs |"
    )
    print(
        f"| batch spans end before their `__next__` ends ({results['batch_ready_margin_us']['count']} batches, workers"
        f" 0 and 2) | min margin {results['batch_ready_margin_us']['min']:.1f} µs | ≥ 0 |"
    )
    print(
        "| cost per batch: 3 spans (batch, fetch, collate), 2 run-queue reads, the tensor count, the `__next__`"
        f" record, one write | {s['added_per_batch_us']:.2f} µs ({s['added_per_span_us']:.2f} µs per span) | |"
    )
    print(
        f"| cost per tokenizer span (call: {s['tokenizer_call_us']:.0f} µs) | {s['added_per_tokenizer_call_us']:.2f} µs"
        " | < 5 µs |"
    )
    print(
        f"| default workload: {w['spans_per_step']:.0f} spans/step × cost / step time ({step_on:.1f} ms) |"
        f" {w['estimated_overhead_pct']:.3f} % | < 3 % |"
    )
    print(
        f"| default workload A/B, median step with vs without spans ({repeats} runs each) | {w['ab_overhead_pct']:+.2f}"
        f" % (with {w['step_ms_with_spans']}, without {w['step_ms_without_spans']} ms) | noise on 2 cores |"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
