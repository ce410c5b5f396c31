"""The loaders' settings as each DataLoader really got them, and the num_workers dlprof sweep imposes."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from dlprof.capture import probe


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
