"""Findings made by hand, one per basis of gain, and a report that holds them: what the renderers' tests print (the
findings themselves are built by dlprof.advice.findings, tested in tests/advice)."""

from __future__ import annotations

import dataclasses

from dlprof.results.findings import (
    FINDING_PADDING,
    FINDING_PRETOKENIZE,
    FINDING_SHARED_MEMORY,
    FINDING_THREADS,
    GAIN_MEASURED,
    GAIN_NONE,
    GAIN_PREDICTED,
    GAIN_UP_TO,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    Finding,
)
from dlprof.results.report import Report

#: The largest gain first, as Advice.findings holds them; the last tells no gain in speed.
FINDINGS = (
    Finding(
        id=FINDING_PADDING,
        severity=SEVERITY_WARNING,
        title="pad to the longest sequence",
        evidence=(
            "62.5 % of the tokens in a batch are padding (mean of 48 batches): every sample is padded to 2048 tokens,"
            " the longest real sequence of a batch averages 768"
        ),
        fix='tokenizer(..., padding="longest") or DataCollatorWithPadding; group_by_length=True pads less still',
        gain_pct=31.4,
        gain_basis=GAIN_UP_TO,
    ),
    Finding(
        id=FINDING_PRETOKENIZE,
        severity=SEVERITY_WARNING,
        title="pre-tokenize the dataset once",
        evidence="the tokenizer takes 8.10 ms of a batch's 9.40 ms of CPU in the workers",
        fix="dataset.map(tokenize, batched=True) once before training, and save it",
        gain_pct=12.2,
        gain_basis=GAIN_PREDICTED,
    ),
    Finding(
        id=FINDING_THREADS,
        severity=SEVERITY_INFO,
        title="threads oversubscribed",
        evidence="2 workers with 5 threads each and training's 4 intra-op threads on 4 usable cores",
        fix="torch.set_num_threads(1) in worker_init_fn, and TOKENIZERS_PARALLELISM=false",
        gain_pct=4.04,
        gain_basis=GAIN_MEASURED,
    ),
    Finding(
        id=FINDING_SHARED_MEMORY,
        severity=SEVERITY_ERROR,
        title="/dev/shm too small for the batches in flight",
        evidence=(
            "96.0 MiB of batches in flight (4.0 MiB x prefetch_factor 2 x 12 workers) against 64.0 MiB of /dev/shm"
        ),
        fix="docker run --shm-size=1g, or torch.multiprocessing.set_sharing_strategy('file_system')",
        gain_pct=None,
        gain_basis=GAIN_NONE,
    ),
)


def with_findings(report: Report, findings: tuple[Finding, ...] = FINDINGS) -> Report:
    """``report`` with ``findings`` on each run's advice (a report of the same type: a NotebookReport stays one)."""
    runs = [dataclasses.replace(r, advice=dataclasses.replace(r.advice, findings=findings)) for r in report.runs]
    return dataclasses.replace(report, runs=runs)
