"""What producing a batch costs, measured where it happens: in the DataLoader workers (dlprof's spans).

Per batch: wall and CPU time of the dataset fetch (tokenizer calls excluded), of the tokenizer calls,
and of ``collate_fn``. CPU time against wall time tells CPU-bound loading (more workers than free
cores will not help) from loading that waits (I/O, sleeps, locks: workers can exceed cores).
"""

from __future__ import annotations

from collections import defaultdict

from dlprof.analysis.stats import summarize
from dlprof.core import schema
from dlprof.results.analysis import BatchCost, LoaderStats, WaitStats, WorkerStats
from dlprof.trace.run import LoaderSpan, TraceRun

#: CPU time / wall time of a batch (less the time it waited for a core) at or above which loading
#: counts as CPU-bound, and at or below which it counts as waiting (I/O-bound); between, mixed.
CPU_BOUND_FRACTION = 0.7
IO_BOUND_FRACTION = 0.3


def _inside(span: LoaderSpan, outer: LoaderSpan | None) -> bool:
    return outer is not None and outer.start_us <= span.start_us and span.end_us <= outer.end_us


def _first(spans: list[LoaderSpan] | None) -> LoaderSpan | None:
    return spans[0] if spans else None


def _batch_costs(spans: list[LoaderSpan]) -> list[BatchCost]:
    by_batch: dict[tuple, dict[str, list[LoaderSpan]]] = defaultdict(lambda: defaultdict(list))
    for span in spans:
        by_batch[(span.pid, span.batch)][span.name].append(span)
    costs = []
    for (pid, key), named in by_batch.items():
        whole = _first(named.get(schema.SPAN_BATCH))
        if whole is None:
            continue  # a batch that failed or was cut by the window
        fetch = _first(named.get(schema.SPAN_FETCH))
        collate = _first(named.get(schema.SPAN_COLLATE))
        tokens = named.get(schema.SPAN_TOKENIZER, [])
        tok_in_fetch = [t for t in tokens if _inside(t, fetch)]
        tok_in_collate = [t for t in tokens if _inside(t, collate)]
        wall = lambda ts: sum(t.dur_us for t in ts) / 1000
        cpu = lambda ts: sum(t.cpu_us for t in ts) / 1000
        costs.append(
            BatchCost(
                batch=key,
                worker=whole.worker,
                pid=pid,
                end_us=whole.end_us,
                wall_ms=whole.dur_us / 1000,
                cpu_ms=whole.cpu_us / 1000,
                runq_ms=whole.runq_us / 1000,
                # Clamped: overlapping or repeated tokenizer spans can sum to more than the stage holding them.
                fetch_ms=max(0.0, fetch.dur_us / 1000 - wall(tok_in_fetch)) if fetch else 0.0,
                fetch_cpu_ms=max(0.0, fetch.cpu_us / 1000 - cpu(tok_in_fetch)) if fetch else 0.0,
                tokenize_ms=wall(tokens),
                tokenize_cpu_ms=cpu(tokens),
                collate_ms=max(0.0, collate.dur_us / 1000 - wall(tok_in_collate)) if collate else 0.0,
                collate_cpu_ms=max(0.0, collate.cpu_us / 1000 - cpu(tok_in_collate)) if collate else 0.0,
                tensors=collate.tensors if collate else 0,
            )
        )
    return sorted(costs, key=lambda c: c.end_us)


def _memory(run: TraceRun) -> dict[int, tuple[float, float | None]]:
    """Per pid: last PSS (MiB) and its growth (MiB per minute) inside the traced window.

    The window, not the whole run: the main process's start-up (imports, model load) would swamp
    the growth that matters, a worker's copy-on-read while it serves batches. The manifest's whole-run
    summary is the fallback for traces whose counters were cut.
    """
    found: dict[int, tuple[float, float | None]] = {}
    series: dict[int, list] = defaultdict(list)
    for sample in run.memory:
        series[sample.pid].append(sample)
    for pid, samples in series.items():
        samples.sort(key=lambda s: s.ts_us)
        minutes = (samples[-1].ts_us - samples[0].ts_us) / 60e6
        growth = (samples[-1].pss_mib - samples[0].pss_mib) / minutes if minutes > 0 and len(samples) > 1 else None
        found[pid] = (samples[-1].pss_mib, growth)
    for p in run.manifest.memory.processes if run.manifest else ():
        if p.pid not in found and p.pss_mib_last is not None:
            found[p.pid] = (p.pss_mib_last, None)
    return found


def _wait_stats(run: TraceRun, costs: list[BatchCost]) -> WaitStats | None:
    ready_at = {c.batch: c.end_us for c in costs}
    linked = [(c, ready_at[c.batch]) for c in run.next_calls if c.batch is not None and c.batch in ready_at]
    if not linked or not run.steps:
        return None
    not_ready = ready = 0.0
    for call, produced in linked:
        waiting_for_production = min(max(produced - call.start_us, 0.0), call.dur_us)
        not_ready += waiting_for_production
        ready += call.dur_us - waiting_for_production
    steps = len(run.steps)
    return WaitStats(waits=len(linked), not_ready_ms_mean=not_ready / 1000 / steps, ready_ms_mean=ready / 1000 / steps)


def loader_stats(run: TraceRun) -> LoaderStats | None:
    """Loader statistics from dlprof's worker spans; ``None`` for a trace without them."""
    costs = _batch_costs(run.loader_spans)
    if not costs:
        return None
    memory = _memory(run)
    by_pid: dict[int, list[BatchCost]] = defaultdict(list)
    for c in costs:
        by_pid[c.pid].append(c)
    workers = []
    for pid, mine in sorted(by_pid.items(), key=lambda kv: (kv[1][0].worker, kv[0])):
        mean_ms = sum(c.wall_ms for c in mine) / len(mine)
        pss = memory.get(pid, (None, None))
        workers.append(
            WorkerStats(
                worker=mine[0].worker,
                pid=pid,
                batches=len(mine),
                batch_ms_mean=mean_ms,
                cpu_ms_mean=sum(c.cpu_ms for c in mine) / len(mine),
                capacity_per_s=1000 / mean_ms if mean_ms > 0 else None,
                pss_mib_last=pss[0],
                pss_growth_mib_per_min=pss[1],
            )
        )
    # Time spent waiting for a core is neither work nor I/O: leave it out of the fraction.
    wall = sum(c.wall_ms - c.runq_ms for c in costs)
    cpu_fraction = min(1.0, sum(c.cpu_ms for c in costs) / wall) if wall > 0 else 0.0
    bound = "cpu" if cpu_fraction >= CPU_BOUND_FRACTION else "io" if cpu_fraction <= IO_BOUND_FRACTION else "mixed"
    mean = lambda attr: sum(getattr(c, attr) for c in costs) / len(costs)
    return LoaderStats(
        batches=costs,
        batch=summarize([c.wall_ms for c in costs]),
        batch_cpu_ms_mean=mean("cpu_ms"),
        batch_runq_ms_mean=mean("runq_ms"),
        fetch=summarize([c.fetch_ms for c in costs]),
        fetch_cpu_ms_mean=mean("fetch_cpu_ms"),
        tokenize=summarize([c.tokenize_ms for c in costs]),
        tokenize_cpu_ms_mean=mean("tokenize_cpu_ms"),
        collate=summarize([c.collate_ms for c in costs]),
        collate_cpu_ms_mean=mean("collate_cpu_ms"),
        tensors_per_batch=mean("tensors"),
        cpu_fraction=cpu_fraction,
        bound=bound,
        in_main_process=all(c.worker < 0 for c in costs),
        workers=workers,
        wait=_wait_stats(run, costs),
    )
