"""Switching a running DataLoader's worker settings (the in-process trials): no batch lost or repeated, the same order
as without switching, the old workers gone, the script's randomness untouched."""

from __future__ import annotations

import collections
import time
import warnings

import psutil
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler, get_worker_info

from dlprof.capture import probe, spanfile
from dlprof.capture.probe import switch
from dlprof.capture.probe.switch import Setting

SIZE = 67  # an epoch of 17 batches of 4 (the last one short)


class Numbers(Dataset):
    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, index: int) -> int:
        time.sleep(0.0005)  # workers take a while: batches are in flight at a switch
        return index


class EveryOtherFirst(Sampler):
    """A custom sampler: the odd indices, then the even ones."""

    def __len__(self) -> int:
        return SIZE

    def __iter__(self):
        yield from range(1, SIZE, 2)
        yield from range(0, SIZE, 2)


class GrowingBatches(Sampler):
    """A custom batch sampler: batches of 1, 2, ... 6 indices, over and over (21 batches an epoch)."""

    def __iter__(self):
        start, size = 0, 1
        while start < SIZE:
            yield list(range(start, min(SIZE, start + size)))
            start, size = start + size, size % 6 + 1

    def __len__(self) -> int:
        return sum(1 for _ in iter(self))


class Shards(IterableDataset):
    """An IterableDataset sharded over workers with get_worker_info: each worker yields its share once."""

    def __iter__(self):
        info = get_worker_info()
        count, index = (1, 0) if info is None else (info.num_workers, info.id)
        for i in range(index, SIZE, count):
            time.sleep(0.0005)
            yield i


def _setting(num_workers: int, persistent: bool = False) -> Setting:
    return Setting(num_workers, 2 if num_workers else None, persistent)


def _as_list(batch) -> list[int]:
    return batch.tolist() if isinstance(batch, torch.Tensor) else [int(batch)]


def _train(loader: DataLoader, plan: dict[int, Setting], epochs: int = 2, reports: list | None = None) -> list[list]:
    """Each epoch's samples in the order the script got them, keeping its own iterator, with a switch asked for
    before batch ``i`` (counted over the epochs) for every ``i`` in ``plan``."""
    reports = [] if reports is None else reports
    seen, i, asked = [], 0, set()
    for _ in range(epochs):
        epoch, iterator = [], iter(loader)
        while True:
            if i in plan and i not in asked:
                asked.add(i)
                switch.request(loader._dlprof_loader_id, plan[i], reports.append)
            try:
                batch = next(iterator)
            except StopIteration:
                break
            epoch += _as_list(batch)
            i += 1
        seen.append(epoch)
    return seen


def _map_loader(kind: str, num_workers: int, persistent: bool, pin_memory: bool) -> DataLoader:
    options = {"num_workers": num_workers, "pin_memory": pin_memory}
    if num_workers:
        options["persistent_workers"] = persistent
    if kind == "shuffled":
        return DataLoader(Numbers(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3), **options)
    if kind == "sampler":
        return DataLoader(Numbers(), batch_size=4, sampler=EveryOtherFirst(), **options)
    if kind == "batch_sampler":
        return DataLoader(Numbers(), batch_sampler=GrowingBatches(), **options)
    if kind == "no_batching":  # batch_size=None: the loader's sampler indexes samples one by one
        return DataLoader(
            Numbers(), batch_size=None, shuffle=True, generator=torch.Generator().manual_seed(5), **options
        )
    raise AssertionError(kind)


#: Switches over two epochs (17 batches each; "no_batching" has 67 an epoch): 0 -> n, n -> 0, n -> m, to and from
#: persistent workers, several inside one epoch, and one at an epoch's end (its last indices are in flight: it
#: waits for the next epoch start). Each comes after the one before has happened, as the trials' segments do.
PLANS = {
    "from_workers": (
        2,
        False,
        {3: _setting(0), 7: _setting(3), 16: _setting(1, True), 22: _setting(2), 28: _setting(0)},
    ),
    "from_none": (0, False, {2: _setting(2), 9: _setting(2, True), 20: _setting(1), 30: _setting(0)}),
    "from_persistent": (2, True, {4: _setting(1, True), 10: _setting(0), 19: _setting(3), 25: _setting(2, True)}),
}


@pytest.fixture
def installed(tmp_path):
    probe.install(str(tmp_path / "spans"))
    warnings.filterwarnings("ignore", message=".*pin_memory.*")  # no accelerator here: torch says so
    yield tmp_path / "spans"
    probe.uninstall()


@pytest.mark.parametrize("kind", ["shuffled", "sampler", "batch_sampler", "no_batching"])
@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("pin_memory", [False, True])
def test_no_batch_lost_or_repeated_and_the_order_unchanged(installed, kind, plan, pin_memory):
    num_workers, persistent, switches = PLANS[plan]
    if kind == "no_batching":
        switches = {i * 4: setting for i, setting in switches.items()}
    unswitched = _train(_map_loader(kind, num_workers, persistent, pin_memory), {})
    reports: list[switch.SwitchReport] = []
    switched = _train(_map_loader(kind, num_workers, persistent, pin_memory), switches, reports=reports)
    assert switched == unswitched
    assert all(sorted(epoch) == list(range(SIZE)) for epoch in switched)
    assert len(reports) == len(switches) and all(r.error is None for r in reports)
    inside = [r for r in reports if not r.at_epoch_start]
    assert inside and all(r.first_batch_ms >= r.start_ms >= 0 and r.shutdown_ms >= 0 for r in inside)


def test_the_old_workers_are_shut_down(installed):
    loader = _map_loader("shuffled", 2, False, False)
    iterator = iter(loader)
    next(iterator)
    old = [w.pid for w in iterator._workers]
    assert all(psutil.pid_exists(pid) for pid in old)
    reports = []
    switch.request(loader._dlprof_loader_id, _setting(1), reports.append)
    next(iterator)
    (report,) = reports
    assert report.batches_drained > 0 and report.error is None
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in old)
    new = [w.pid for w in iterator._dlprof_delegate.inner._workers]
    assert len(new) == 1 and new[0] not in old and loader.num_workers == 1
    assert report.worker_pids == tuple(new)  # the setting's memory is that of these workers
    list(iterator)  # the epoch ends: the new worker is shut down with it, as torch does
    assert not psutil.pid_exists(new[0]) or psutil.Process(new[0]).status() == psutil.STATUS_ZOMBIE


def test_a_persistent_loader_never_resets_a_shut_down_iterator(installed):
    loader = _map_loader("shuffled", 2, True, False)
    first = iter(loader)
    next(first)
    switch.request(loader._dlprof_loader_id, _setting(0), lambda report: None)
    rest = list(first)
    assert loader._iterator is None and loader.persistent_workers is False
    assert len(rest) == 16 and len(list(loader)) == 17  # the next epoch builds its own iterator
    epoch = iter(loader)
    next(epoch)
    switch.request(loader._dlprof_loader_id, _setting(1, True), lambda report: None)
    next(epoch)  # switched inside this epoch: the loader keeps the new persistent iterator for the next
    assert loader._iterator is epoch._dlprof_delegate.inner and loader._iterator._num_workers == 1
    list(epoch)
    assert iter(loader) is loader._iterator  # reset, not rebuilt: its worker lives on


def test_spans_carry_the_epoch_and_batch_the_script_got(installed):
    """Batch indices go on from where the switch came: the new workers' spans name the batches the script got."""
    loader = _map_loader("shuffled", 2, False, False)
    _train(loader, PLANS["from_workers"][2], epochs=3)
    probe.flush()
    found = spanfile.read_span_files(installed)
    produced = collections.Counter((s.epoch, s.batch) for s in found.spans if s.name == "batch")
    returned = collections.Counter((c.epoch, c.batch) for c in found.next_calls)
    assert produced == returned and set(produced.values()) == {1}
    assert sorted(returned) == [(epoch, batch) for epoch in range(3) for batch in range(17)]
    (record,) = probe.loader_records()
    assert [e.batches for e in record.epochs] == [17, 17, 17] and record.batches == 51


def test_the_scripts_randomness_is_untouched(installed):
    def draws(switches):
        torch.manual_seed(0)
        loader = DataLoader(Numbers(), batch_size=4, shuffle=True, num_workers=1)  # the sampler draws from torch
        seen = _train(loader, switches, epochs=3)
        return seen, torch.rand(3).tolist()

    assert draws({}) == draws({2: _setting(2), 8: _setting(0), 20: _setting(1, True), 40: _setting(1)})


def test_a_switch_at_an_epochs_end_waits_for_the_next_epoch(installed):
    loader = _map_loader("shuffled", 2, False, False)
    reports = []
    unswitched = _train(_map_loader("shuffled", 2, False, False), {})
    # Before the epoch's last batch (16), every index is in flight: its sampler has none left.
    assert _train(loader, {16: _setting(0)}, reports=reports) == unswitched
    (report,) = reports
    assert report.at_epoch_start and report.first_batch_ms is not None and loader.num_workers == 0


def test_an_iterable_dataset_switches_at_epoch_starts(installed):
    loader = DataLoader(Shards(), batch_size=4, num_workers=2)
    reports = []
    plan = {2: _setting(0), 20: _setting(3), 40: _setting(1, True), 58: _setting(2), 75: _setting(1, True)}
    seen = _train(loader, plan, epochs=6, reports=reports)
    assert all(sorted(epoch) == list(range(SIZE)) for epoch in seen)  # sharded: each sample once per epoch
    assert [r.setting for r in reports] == list(plan.values()) and all(r.at_epoch_start for r in reports)
    assert all(r.first_batch_ms >= r.start_ms >= 0 for r in reports)
    assert [len(r.worker_pids) for r in reports] == [0, 3, 1, 2, 1]  # each switch's new workers


def test_restore_gives_the_loader_its_own_settings(installed):
    loader = _map_loader("shuffled", 2, False, False)
    iterator = iter(loader)
    next(iterator)
    switch.request(loader._dlprof_loader_id, _setting(1, True), lambda report: None)
    next(iterator)
    assert (loader.num_workers, loader.persistent_workers) == (1, True)
    switch.restore(loader._dlprof_loader_id, Setting.of(_map_loader("shuffled", 2, False, False)))
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (2, 2, False)
    assert loader._iterator is None
    assert len(list(iterator)) == 15  # the epoch under way goes on at the tried setting


def test_a_setting_that_cannot_start_goes_back_to_the_old_one(installed, monkeypatch):
    loader = _map_loader("shuffled", 2, False, False)
    unswitched = _train(_map_loader("shuffled", 2, False, False), {}, epochs=1)
    original = DataLoader._get_iterator

    def refuse_three(self):
        if self.num_workers == 3:
            raise OSError("no more processes")
        return original(self)

    monkeypatch.setattr(DataLoader, "_get_iterator", refuse_three)
    reports = []
    assert _train(loader, {5: _setting(3)}, epochs=1, reports=reports) == unswitched
    (report,) = reports
    assert "no more processes" in report.error and loader.num_workers == 2


def test_a_loader_with_a_timeout_switches_to_no_workers_and_back(installed):
    """A loader without workers refuses a timeout: it gets none while it has no workers, its own again after."""
    options = {"batch_size": 4, "shuffle": True, "timeout": 30}
    loader = DataLoader(Numbers(), num_workers=2, generator=torch.Generator().manual_seed(3), **options)
    unswitched = _train(DataLoader(Numbers(), num_workers=2, generator=torch.Generator().manual_seed(3), **options), {})
    own = Setting.of(loader)
    reports = []
    assert _train(loader, {3: Setting(0), 20: Setting(1, 2, False, 30)}, reports=reports) == unswitched
    assert [r.error for r in reports] == [None, None] and loader.timeout == 30
    switch.request(loader._dlprof_loader_id, Setting(0), reports.append)
    list(loader)
    assert loader.timeout == 0
    switch.restore(loader._dlprof_loader_id, own)
    assert (loader.num_workers, loader.timeout) == (2, 30)
