"""`dlprof record` end to end: every batch the built-in workload's loader made is measured where it was made and
kept in the manifest's ``batches``."""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import load_trace

from dlprof.core import schema
from dlprof.core.manifest import Manifest, parse_manifest


def _manifest(run) -> Manifest:
    manifest, problems = parse_manifest(load_trace(run)[schema.MANIFEST_KEY])
    assert problems == () and manifest is not None
    return manifest


def _assert_one_entry_per_batch_made(manifest: Manifest) -> None:
    batches, loader = manifest.batches, manifest.loader
    assert loader is not None and batches.columns_agree()
    made = list(zip(batches.loader, batches.epoch, batches.batch))
    assert len(set(made)) == len(made) and set(batches.loader) == {loader.id}
    taken = {(loader.id, epoch, batch) for epoch, e in enumerate(loader.epochs) for batch in range(e.batches)}
    assert taken <= set(made)
    # beyond the batches taken, only those the workers had made ahead (prefetch_factor each) as the run stopped
    ahead = (loader.prefetch_factor or 0) * loader.num_workers
    assert len(made) - len(taken) <= len(loader.epochs) * ahead
    assert list(batches.made_ns) == sorted(batches.made_ns)


def _assert_the_built_in_collator_is_seen(manifest: Manifest) -> None:
    batches = manifest.batches
    assert batches.padding_source == "attention_mask" and batches.unmeasured == 0 and batches.check_us > 0
    columns = zip(batches.rows, batches.width, batches.real_tokens, batches.longest, batches.nbytes)
    for rows, width, real_tokens, longest, nbytes in columns:
        assert 1 <= rows <= 2 and 1 <= width <= 128  # --batch-size 2 --max-length 128
        assert longest == width  # it pads each batch to its longest sample
        assert longest <= real_tokens <= rows * width
        assert nbytes == 3 * rows * width * 8  # input_ids, labels and attention_mask, int64
    # the samples of one epoch are different: so are its batches' fingerprints
    by_epoch = defaultdict(list)
    for epoch, fingerprint in zip(batches.epoch, batches.fingerprint):
        by_epoch[epoch].append(fingerprint)
    assert all(len(set(prints)) == len(prints) and all(len(p) == 16 for p in prints) for prints in by_epoch.values())


def test_every_batch_two_workers_made_is_measured_in_its_worker(workload_run_2):
    manifest = _manifest(workload_run_2)
    _assert_one_entry_per_batch_made(manifest)
    _assert_the_built_in_collator_is_seen(manifest)
    assert set(manifest.batches.worker) == {0, 1}


@pytest.mark.slow
def test_every_batch_is_measured_in_the_main_process_without_workers(workload_run_0):
    manifest = _manifest(workload_run_0)
    _assert_one_entry_per_batch_made(manifest)
    _assert_the_built_in_collator_is_seen(manifest)
    assert set(manifest.batches.worker) == {-1}
