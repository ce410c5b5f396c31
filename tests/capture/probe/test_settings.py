"""The loaders' settings as each DataLoader really got them, and the num_workers dlprof sweep imposes."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from dlprof.capture import probe
from dlprof.capture.probe import settings


def test_loader_settings_are_recorded_as_the_dataloader_got_them(spans_dir):
    DataLoader(
        TensorDataset(torch.arange(4.0)), batch_size=2, num_workers=3, pin_memory=False, multiprocessing_context="spawn"
    )
    (record,) = probe.loader_records()
    assert record.config["num_workers"] == 3
    assert record.config["prefetch_factor"] == 2  # PyTorch's default, filled in by the DataLoader
    assert record.config["start_method"] == "spawn"
    assert record.config["dataset_len"] == 4


def test_sweep_overrides_num_workers_and_keeps_what_the_script_asked_for(tmp_path):
    probe.install(str(tmp_path), overrides={"num_workers": 0})
    try:
        # without workers, DataLoader would reject prefetch_factor and persistent_workers: both are dropped
        loader = DataLoader(torch.arange(4.0), batch_size=2, num_workers=2, prefetch_factor=4, persistent_workers=True)
        assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (0, None, False)
        (record,) = probe.loader_records()
        assert record.config["num_workers"] == 0 and record.config["num_workers_requested"] == 2
    finally:
        probe.uninstall()
    probe.install(str(tmp_path), overrides={"num_workers": 2})
    try:
        loader = DataLoader(torch.arange(4.0), batch_size=2)
        (record,) = probe.loader_records()
        assert loader.num_workers == 2 and record.config["num_workers_requested"] == 0
    finally:
        probe.uninstall()


def test_without_overrides_the_request_is_not_recorded(spans_dir):
    DataLoader(torch.arange(4.0), batch_size=2, num_workers=1)
    (record,) = probe.loader_records()
    assert record.config["num_workers"] == 1 and record.config["num_workers_requested"] is None


def hugging_face_like(attribute: str, shards: int) -> IterableDataset:
    """An iterable dataset that looks like ``datasets.IterableDataset`` (not imported: dlprof never imports it)."""
    source = {attribute: property(lambda self: shards), "__iter__": lambda self: iter(range(4))}
    cls = type("IterableDataset", (IterableDataset,), {"__module__": "datasets.iterable_dataset", **source})
    return cls()


class Shards(IterableDataset):
    def __init__(self, n_shards):
        self.n_shards = n_shards

    def __iter__(self):
        return iter(range(4))


class Exploding(IterableDataset):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(f"{name}: no such thing")

    def __iter__(self):
        return iter(range(4))


class MappedWithShards(TensorDataset):
    n_shards = 3


@pytest.mark.parametrize(
    ("dataset", "shards"),
    [
        (hugging_face_like("n_shards", 3), 3),
        (hugging_face_like("num_shards", 5), 5),  # the name some versions of ``datasets`` give it
        (Shards(4), 4),  # anyone's iterable dataset that says how many shards it has
        (Shards(True), None),
        (Shards("4"), None),
        (Shards(None), None),
        (Exploding(), None),
        (MappedWithShards(torch.arange(4.0)), None),  # shards mean something only to an iterable dataset
        (TensorDataset(torch.arange(4.0)), None),
    ],
)
def test_an_iterable_datasets_shards_are_recorded(spans_dir, dataset, shards):
    DataLoader(dataset, batch_size=2)
    (record,) = probe.loader_records()
    assert record.config["dataset_shards"] == shards


def test_only_datasets_own_iterable_dataset_is_asked_for_num_shards():
    assert settings.dataset_shards(hugging_face_like("num_shards", 2)) == 2
    other = type("Other", (IterableDataset,), {"num_shards": 2, "__iter__": lambda self: iter(())})()
    assert settings.dataset_shards(other) is None
