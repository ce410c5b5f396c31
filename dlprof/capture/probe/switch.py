"""Switching a running DataLoader to other worker settings, with no batch lost or repeated: the in-process trials.

:mod:`dlprof.capture.trials` asks for a switch with :func:`request`; it happens at the loader's next
``__next__`` call, on whichever iterator the script holds (``for batch in loader``, a script's own
``it = iter(loader)``, accelerate's ``DataLoaderShard``, which iterates the DataLoader it wraps), so that the
script's loop never changes:

* **Inside an epoch** (map-style datasets): the epoch's sampler iterator is paused (the old iterator sends
  its workers no new index), the batches in flight are drained in order and kept, the old workers are shut
  down, and the next iterator is built by the loader's own ``_get_iterator()`` with the new settings while
  the loader's index sampler stands for the paused sampler iterator: it continues the same sampler position
  with the same dataset, ``collate_fn``, ``worker_init_fn``, ``pin_memory`` and generator. Its first batch is
  fetched at once (from creating the iterator to that batch: the restart's cost, forking included). The
  script's iterator then hands out the drained batches, then the new iterator's, until the epoch ends;
  later epochs are the loader's own, at the new settings.
* **At an epoch start**: an ``IterableDataset`` keeps its position inside its workers, so its loader switches
  only where an epoch begins (in ``__iter__``); a map-style loader does too when its epoch has no index left.

Building the iterator draws its base seed from ``loader.generator`` (or torch's global generator): both are put
back as they were, so the script's own randomness does not change. Only torch's own iterator classes can be
switched; another (a ``StatefulDataLoader``'s, say) is reported as not switchable.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlprof.capture.probe import settings
from dlprof.capture.probe.timing import LoaderContext

if TYPE_CHECKING:
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter, _SingleProcessDataLoaderIter

_time_ns = time.time_ns
#: torch's warning when a DataLoader makes more workers than there are cores.
_TOO_MANY_WORKERS = ".*DataLoader will create.*worker processes.*"
#: ``torch.utils.data.dataloader._DatasetKind.Map``: a map-style dataset, which a sampler indexes.
_MAP_STYLE = 0


@dataclass(frozen=True)
class Setting:
    """The DataLoader settings a switch gives a loader."""

    num_workers: int
    #: None without workers (the DataLoader refuses one then).
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    #: The loader's ``timeout`` with workers (0 without: a loader without workers refuses any other).
    timeout_s: float = 0.0

    @classmethod
    def of(cls, loader: Any) -> Setting:
        """The loader's settings now."""
        return cls(loader.num_workers, loader.prefetch_factor, bool(loader.persistent_workers), loader.timeout)


@dataclass(kw_only=True)
class SwitchReport:
    """One switch, as it happened (ms; None: did not apply)."""

    setting: Setting
    #: The switch came where an epoch began (in ``__iter__``), not inside one.
    at_epoch_start: bool = False
    #: Waiting for the batches the old setting had in flight (kept for the script, in order).
    drain_ms: float | None = None
    batches_drained: int = 0
    #: Shutting the old setting's workers down.
    shutdown_ms: float | None = None
    #: Creating the new iterator (its workers started).
    start_ms: float | None = None
    #: From the start of that creation to the new iterator's first batch.
    first_batch_ms: float | None = None
    #: Why the loader could not be switched (it goes on at its old settings, or its own).
    error: str | None = None
    #: The process ids of the workers the new iterator started (their memory, sampled from outside, is the setting's).
    worker_pids: tuple[int, ...] = ()


Done = Callable[[SwitchReport], None]
#: Switches asked for, by loader id: the setting, and who to tell once it happened.
PENDING: dict[int, tuple[Setting, Done]] = {}


def request(loader_id: int, setting: Setting, done: Done) -> None:
    """Switch loader ``loader_id`` to ``setting`` at its next ``__next__`` (or ``__iter__``); ``done(report)`` is
    called once its first batch at the new setting is there (or the switch failed)."""
    PENDING[loader_id] = (setting, done)


def cancel(loader_id: int) -> None:
    """Forget a switch that has not happened yet."""
    PENDING.pop(loader_id, None)


def restore(loader_id: int, setting: Setting) -> None:
    """Give the loader ``setting`` back for its next epochs, without touching the iterator the script holds now."""
    cancel(loader_id)
    loader = _loader(loader_id)
    if loader is None:
        return
    current = loader.__dict__.get("_iterator")
    if current is not None and (not setting.persistent_workers or current._num_workers != setting.num_workers):
        loader._iterator = None  # the next epoch builds its own iterator; the old one ends with its epoch
    _apply(loader, setting)


def _loader(loader_id: int) -> Any:
    return settings.LOADERS[loader_id].loader() if 0 <= loader_id < len(settings.LOADERS) else None


def _apply(loader: Any, setting: Setting) -> None:
    """Give the loader these settings (DataLoader.__setattr__ refuses ``persistent_workers`` once built)."""
    loader.num_workers = setting.num_workers
    loader.prefetch_factor = setting.prefetch_factor if setting.num_workers > 0 else None
    loader.timeout = setting.timeout_s if setting.num_workers > 0 else 0
    object.__setattr__(loader, "persistent_workers", bool(setting.persistent_workers and setting.num_workers > 0))


def _ms(start_ns: int, end_ns: int) -> float:
    return round((end_ns - start_ns) / 1e6, 3)


class _Pausable:
    """An epoch's sampler iterator that a switch can pause (no index comes out) and look one index ahead in."""

    __slots__ = ("inner", "paused", "ahead")

    def __init__(self, inner: Any):
        self.inner = inner
        self.paused = False
        self.ahead: list = []

    def __iter__(self) -> _Pausable:
        return self

    def __next__(self) -> Any:
        if self.paused:
            raise StopIteration
        if self.ahead:
            return self.ahead.pop()
        return next(self.inner)

    def exhausted(self) -> bool:
        """Whether the epoch has no index left (the one looked at is kept for the next ``__next__``)."""
        if self.ahead:
            return False
        try:
            self.ahead.append(next(self.inner))
        except StopIteration:
            return True
        return False


class _Continue:
    """Stands in for the loader's index sampler while the next iterator is built: iterating it continues the epoch."""

    def __init__(self, sampler_iter: _Pausable):
        self.sampler_iter = sampler_iter

    def __iter__(self) -> _Pausable:
        return self.sampler_iter


class _Raised:
    """A batch whose loading raised: raised again when the script reaches it, not earlier."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


class _Delegate:
    """What the script's iterator hands out after a switch: the batches drained from the old setting, then the new
    iterator's."""

    __slots__ = ("buffered", "inner")

    def __init__(self, buffered: deque, inner: Any):
        self.buffered = buffered
        self.inner = inner

    def next(self) -> Any:
        if self.buffered:
            item = self.buffered.popleft()
            if isinstance(item, _Raised):
                raise item.error
            return item
        return self.inner.__next__()


def _iterator_classes() -> tuple[type[_SingleProcessDataLoaderIter], type[_MultiProcessingDataLoaderIter]]:
    from torch.utils.data import dataloader

    return dataloader._SingleProcessDataLoaderIter, dataloader._MultiProcessingDataLoaderIter


def at_next(outer: Any, ctx: LoaderContext) -> None:
    """Before ``outer.__next__`` fetches: switch its loader now if a switch is pending (inside the epoch), or leave it
    for the next epoch start (an IterableDataset, or an epoch with no index left)."""
    pending = PENDING.get(ctx.loader_id)
    if pending is None:
        return
    loader = _loader(ctx.loader_id)
    if loader is None or loader._dataset_kind != _MAP_STYLE:  # gone, or an IterableDataset: only at an epoch start
        return
    setting, done = pending
    delegate = outer.__dict__.get("_dlprof_delegate")
    current = delegate.inner if delegate is not None else outer
    if not isinstance(current, _iterator_classes()):
        del PENDING[ctx.loader_id]
        done(
            SwitchReport(setting=setting, error=f"its iterator ({type(current).__name__}) is not one dlprof can switch")
        )
        return
    sampler_iter = current._sampler_iter
    if sampler_iter is None:
        return
    pausable = sampler_iter if isinstance(sampler_iter, _Pausable) else _Pausable(sampler_iter)
    current._sampler_iter = pausable
    if pausable.exhausted():
        return  # the epoch's last batches are in flight: switch where the next epoch starts
    del PENDING[ctx.loader_id]
    buffered = delegate.buffered if delegate is not None else deque()
    report = _switch_inside_epoch(loader, outer, current, pausable, buffered, ctx, setting)
    done(report)


def _switch_inside_epoch(
    loader: Any, outer: Any, current: Any, pausable: _Pausable, buffered: deque, ctx: LoaderContext, setting: Setting
) -> SwitchReport:
    """Drain ``current``, shut it down and make ``outer`` deliver the rest of the epoch from a new iterator."""
    report = SwitchReport(setting=setting)
    previous = Setting.of(loader)
    t0 = _time_ns()
    pausable.paused = True
    before = len(buffered)
    _drain(current, buffered)
    report.batches_drained = len(buffered) - before
    t1 = _time_ns()
    _shutdown(loader, current)
    t2 = _time_ns()
    report.drain_ms, report.shutdown_ms = _ms(t0, t1), _ms(t1, t2)
    offset = outer._num_yielded + len(buffered)  # the epoch's batches taken from the sampler so far
    context = LoaderContext(ctx.spans_dir, ctx.loader_id, ctx.epoch, offset)
    try:
        inner = _build(loader, setting, pausable, context)
    except Exception as error:  # the new setting cannot run here (too many processes, say): back to the old one
        report.error = f"{type(error).__name__}: {error}"
        inner = _build(loader, previous, pausable, context)
    t3 = _time_ns()
    try:
        buffered.append(inner.__next__())
    except StopIteration:
        pass  # nothing was left after all: the epoch ends at the next __next__
    except Exception as error:
        buffered.append(_Raised(error))
    t4 = _time_ns()
    if report.error is None:
        report.start_ms, report.first_batch_ms = _ms(t2, t3), _ms(t2, t4)
        report.worker_pids = worker_pids(inner)
    outer.__dict__["_dlprof_delegate"] = _Delegate(buffered, inner)
    return report


def worker_pids(iterator: Any) -> tuple[int, ...]:
    """The process ids of an iterator's workers (none without workers)."""
    workers = getattr(iterator, "_workers", None) or ()
    return tuple(pid for pid in (getattr(w, "pid", None) for w in workers) if isinstance(pid, int))


def _drain(current: Any, buffered: deque) -> None:
    """The batches ``current``'s workers were asked for (the sampler is paused: no new index goes out), in order."""
    if not isinstance(current, _iterator_classes()[1]):
        return  # no worker: nothing is in flight
    while current._tasks_outstanding > 0 or any(len(info) == 2 for info in current._task_info.values()):
        try:
            buffered.append(current._next_data())
        except StopIteration:
            break
        except Exception as error:  # a sample that raised in a worker: raised when the script reaches it
            buffered.append(_Raised(error))


def _shutdown(loader: Any, current: Any) -> None:
    """Stop ``current``'s workers; the loader forgets it (a persistent loader must not reset a shut-down iterator)."""
    if isinstance(current, _iterator_classes()[1]):
        current._shutdown_workers()
    if loader.__dict__.get("_iterator") is current:
        loader._iterator = None


def _build(loader: Any, setting: Setting, pausable: _Pausable, ctx: LoaderContext) -> Any:
    """The loader's next iterator at ``setting``, continuing the epoch's paused sampler iterator from where it is.

    Built paused (no index goes out while it is built, so the RNG states can be put back before the sampler draws
    again), then primed as torch primes a new iterator.
    """
    pausable.paused = True
    _apply(loader, setting)
    name = "batch_sampler" if loader._auto_collation else "sampler"
    real = getattr(loader, name)
    put_back = _rng_states(loader)
    object.__setattr__(loader, name, _Continue(pausable))
    loader.__dict__["_dlprof_next_ctx"] = ctx
    try:
        with warnings.catch_warnings():  # more workers than cores: the script did not ask for them
            warnings.filterwarnings("ignore", message=_TOO_MANY_WORKERS)
            inner = loader._get_iterator()
    finally:
        object.__setattr__(loader, name, real)
        loader.__dict__.pop("_dlprof_next_ctx", None)
        put_back()
    inner._index_sampler = real  # its later epochs (persistent workers) start over from the loader's sampler
    inner._num_yielded = ctx.batch_offset  # the epoch's batch index, for the spans of a loader without workers
    pausable.paused = False
    if isinstance(inner, _iterator_classes()[1]):
        for _ in range(inner._prefetch_factor * inner._num_workers):
            inner._try_put_index()
    if setting.persistent_workers and setting.num_workers > 0:
        loader._iterator = inner  # the next epoch resets it, as DataLoader.__iter__ does its own
    return inner


def before_iter(loader: Any, loader_id: int) -> tuple[SwitchReport, Done] | None:
    """In ``loader.__iter__``, before the epoch's iterator is made: apply a pending switch (an epoch start)."""
    pending = PENDING.pop(loader_id, None)
    if pending is None:
        return None
    setting, done = pending
    report = SwitchReport(setting=setting, at_epoch_start=True, drain_ms=0.0)
    t0 = _time_ns()
    current = loader.__dict__.get("_iterator")
    if current is not None:  # persistent workers, waiting for the next epoch: they are the old setting's
        _shutdown(loader, current)
    report.shutdown_ms = _ms(t0, _time_ns())
    _apply(loader, setting)
    return report, done


@contextlib.contextmanager
def making_iterator(loader: Any, own: dict) -> Iterator[None]:
    """Around ``loader.__iter__`` making an epoch's iterator at a tried setting: its random draws are those the
    loader's own settings (``own``: its registered config) would make, so that a trial leaves the script's randomness
    unchanged, and torch's warning about more workers than cores is not shown for a count the script did not ask for.

    A new iterator draws a base seed from ``loader.generator`` (or torch's global generator); a persistent loader's
    later epochs reuse theirs and draw none.
    """
    import torch

    now_persistent = bool(loader.persistent_workers and loader.num_workers > 0)
    own_persistent = bool(own.get("persistent_workers") and own.get("num_workers"))
    if loader.num_workers == own.get("num_workers") and now_persistent == own_persistent:
        yield  # the loader's own setting
        return
    # The script's persistent loader made its iterator long before the trials: its epochs draw nothing.
    own_draws = not own_persistent
    now_draws = not now_persistent or loader.__dict__.get("_iterator") is None
    put_back = None
    if own_draws and not now_draws:
        torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
    elif now_draws and not own_draws:
        put_back = _rng_states(loader)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_TOO_MANY_WORKERS)
            yield
    finally:
        if put_back is not None:
            put_back()


def _rng_states(loader: Any) -> Callable[[], None]:
    """Save torch's global RNG state and the loader generator's; returns what puts them back."""
    import torch

    generator = loader.generator
    rng_state = torch.get_rng_state()
    generator_state = generator.get_state() if generator is not None else None

    def put_back() -> None:
        torch.set_rng_state(rng_state)
        if generator is not None:
            generator.set_state(generator_state)

    return put_back


def after_iter(iterator: Any, switched: tuple[SwitchReport, Done], start_ns: int) -> None:
    """``iterator`` was made at the new setting, from ``start_ns``: time its first batch (:func:`first_batch`)."""
    iterator.__dict__.pop("_dlprof_delegate", None)  # a persistent iterator reset for a new epoch delegates no more
    switched[0].start_ms = _ms(start_ns, _time_ns())
    switched[0].worker_pids = worker_pids(iterator)
    iterator.__dict__["_dlprof_switched"] = (switched, start_ns)


def first_batch(iterator: Any, end_ns: int | None) -> None:
    """The first batch after an epoch-start switch came at ``end_ns`` (None: the epoch had none): report the switch."""
    (report, done), start_ns = iterator.__dict__.pop("_dlprof_switched")
    report.first_batch_ms = _ms(start_ns, end_ns) if end_ns is not None else None
    done(report)
