"""What measuring each collated batch costs the probe (dlprof.capture.probe.batch_facts), µs per batch.

Batches shaped like real ones: a fine-tune's 8 x 2048 batch padded to ``max_length`` (input_ids, attention_mask,
labels), the same batch with labels only and with a pad id only, a single short sequence, and a dict of images.

1. ``measure`` called in a loop (warm: the best case), median of repeats.
2. In place: a DataLoader (``num_workers=0``) whose ``collate_fn`` returns the batch, iterated without the probe,
   with the probe but no batch facts, and with both, alternating, in this one process; the medians' differences are
   what the spans and the facts add per batch (the spans' figure is comparable to docs/recording.md's), and the
   probe's own record of each measurement's cost (``check_ns``, median) is shown beside them. ``--gap-ms`` sleeps
   between batches, as a training step would, and times each batch alone: cold caches cost the spans and the facts
   alike several times their cost in a tight loop.

    python3 scripts/measure_batch_facts.py [--batches N] [--repeats R] [--gap-ms MS]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlprof.capture import probe, spanfile  # noqa: E402
from dlprof.capture.probe import batch_facts, timing  # noqa: E402


def _text_batch(rows: int, width: int, *, mask: bool = True, labels: bool = True) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(width // 8, width + 1, (rows,), generator=generator)
    ids = torch.randint(3, 32000, (rows, width), generator=generator)
    real = torch.arange(width)[None, :] < lengths[:, None]
    batch = {"input_ids": ids.masked_fill(~real, 0)}
    if mask:
        batch["attention_mask"] = real.long()
    if labels:
        batch["labels"] = ids.masked_fill(~real, -100)
    return batch


def cases() -> dict[str, tuple[object, int | None]]:
    """Name: (batch, the pad id its collate_fn says)."""
    return {
        "8x2048 input_ids + attention_mask + labels": (_text_batch(8, 2048), None),
        "8x2048 input_ids + labels": (_text_batch(8, 2048, mask=False), None),
        "8x2048 input_ids, pad id": (_text_batch(8, 2048, mask=False, labels=False), 0),
        "1x128 input_ids + attention_mask + labels": (_text_batch(1, 128), None),
        "images 8x3x224x224 float + labels": (
            {"pixel_values": torch.rand(8, 3, 224, 224), "labels": torch.arange(8)},
            None,
        ),
    }


def warm_us(batch: object, pad_id: int | None, calls: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean µs of ``calls`` measurements in a row."""
    measure = batch_facts.measure
    for _ in range(100):
        measure(batch, pad_id)
    means = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(calls):
            measure(batch, pad_id)
        means.append((time.perf_counter_ns() - start) / calls / 1000)
    return statistics.median(means)


class _Returns:
    """A collate_fn that returns one prepared batch (and says its pad id, as a collator holding a tokenizer does)."""

    def __init__(self, batch: object, pad_id: int | None):
        self.batch, self.pad_token_id = batch, pad_id

    def __call__(self, items: list) -> object:
        return self.batch


def _no_facts(collated, collate, made_ns, where):
    return (), timing.count_tensors(collated)


def in_place_us(
    batch: object, pad_id: int | None, batches: int, repeats: int, gap_s: float
) -> tuple[float, float, float]:
    """(µs the spans add per batch, µs the facts add per batch, the probe's median check_ns in µs)."""

    def per_batch_us() -> float:
        # made here: a loader made before the probe is installed is not probed
        loader = torch.utils.data.DataLoader(range(batches), batch_size=1, collate_fn=_Returns(batch, pad_id))
        if not gap_s:
            start = time.perf_counter_ns()
            for _ in loader:
                pass
            return (time.perf_counter_ns() - start) / 1000 / batches
        times, batch_iter = [], iter(loader)
        for _ in range(batches):
            time.sleep(gap_s)  # as a training step would: the loading code's caches go cold in between
            start = time.perf_counter_ns()
            next(batch_iter)
            times.append(time.perf_counter_ns() - start)
        return statistics.median(times) / 1000

    measure = timing._measure
    off, spans, facts, checks = [], [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            off.append(per_batch_us())
            probe.install(tmp)
            timing._measure = _no_facts
            spans.append(per_batch_us())
            timing._measure = measure
            facts.append(per_batch_us())
            probe.flush()
            probe.uninstall()
            checks += [b.check_ns / 1000 for b in spanfile.read_span_files(Path(tmp)).batches]
    median = statistics.median
    return median(spans) - median(off), median(facts) - median(spans), median(checks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="warm: measurements per repeat")
    parser.add_argument("--batches", type=int, default=500, help="in place: batches per loader pass")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--gap-ms", type=float, default=0.0, help="in place: sleep between batches")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as in a DataLoader worker
    print("| batch | warm µs | spans add µs/batch | facts add µs/batch | probe's check_ns median µs |")
    print("|---|---|---|---|---|")
    for name, (batch, pad_id) in cases().items():
        facts = batch_facts.measure(batch, pad_id)
        warm = warm_us(batch, pad_id, args.calls, args.repeats)
        spans_us, facts_us, check_us = in_place_us(batch, pad_id, args.batches, args.repeats, args.gap_ms / 1000)
        shown = f"{name} (rows {facts.rows}, width {facts.width}, real {facts.real_tokens}, {facts.nbytes} bytes)"
        print(f"| {shown} | {warm:.1f} | {spans_us:.1f} | {facts_us:.1f} | {check_us:.1f} |")


if __name__ == "__main__":
    main()
