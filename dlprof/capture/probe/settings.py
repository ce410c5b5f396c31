"""The DataLoaders a script creates, with their settings as each DataLoader really got them.

Each DataLoader built while the probe is installed gets a :class:`LoaderRecord` in this process's
registry: its settings after the DataLoader's own defaults and validation, what ``dlprof sweep``
imposed on it, and its epochs as the main process timed them.
"""

from __future__ import annotations

import inspect
import multiprocessing
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from dlprof.capture.probe.trim import TrimCheck

#: Training frameworks that create DataLoaders, by the module of a frame on the stack as one is built
#: (``frame.f_globals["__name__"]``), most specific first: ms-swift and LLaMA-Factory build theirs through
#: Hugging Face's Trainer, so their frames and the Trainer's are on the stack together.
#: A prefix ending in "." names a package ("swift." is not "swiftly"); "transformers.trainer" also covers
#: trainer_seq2seq and the Trainer's helper modules.
FRAMEWORK_MODULES = (
    ("swift.", "ms-swift"),
    ("llamafactory.", "llamafactory"),
    ("transformers.trainer", "transformers"),
)


@dataclass(kw_only=True)
class EpochRecord:
    """One iteration over a DataLoader, timed in the main process."""

    start_ns: int
    iter_ns: int = 0  # inside __iter__ (iterator creation: worker processes started)
    first_batch_ns: int | None = None  # when the first batch was returned
    batches: int = 0
    end_ns: int | None = None  # duration of the __next__ that raised StopIteration

    def as_manifest(self) -> dict:
        first = None if self.first_batch_ns is None else round((self.first_batch_ns - self.start_ns) / 1e6, 3)
        end = None if self.end_ns is None else round(self.end_ns / 1e6, 3)
        return {"start_ns": self.start_ns, "first_batch_ms": first, "batches": self.batches, "end_ms": end}


@dataclass(kw_only=True)
class LoaderRecord:
    """One DataLoader the script created, with its settings as the DataLoader really got them."""

    loader_id: int
    config: dict
    iterations: int = 0
    batches: int = 0
    length: int | None = None
    epochs: list[EpochRecord] = field(default_factory=list)
    #: The DataLoader itself, while it lives (a switch of its worker settings needs it; its iterators do not know it).
    loader_ref: Callable[[], Any] | None = field(default=None, repr=False, compare=False)
    #: Its first batches checked for padding that trimming could drop (the trials' padding segment).
    trim: TrimCheck = field(default_factory=TrimCheck)

    def loader(self) -> Any:
        """The DataLoader, or None once it is gone."""
        return self.loader_ref() if self.loader_ref is not None else None


#: The DataLoaders created since install, in creation order; a loader's ``loader_id`` is its index.
LOADERS: list[LoaderRecord] = []
#: DataLoader settings imposed on every loader (``{"num_workers": n}``, dlprof sweep).
_OVERRIDES: dict[str, Any] = {}


def loader_records() -> list[LoaderRecord]:
    """The DataLoaders created since :func:`dlprof.capture.probe.install`, in creation order."""
    return list(LOADERS)


def set_overrides(overrides: dict | None) -> None:
    """Impose these DataLoader settings on every loader created from now on (none: the script's own)."""
    _OVERRIDES.clear()
    _OVERRIDES.update(overrides or {})


def clear() -> None:
    """Forget every loader and override."""
    LOADERS.clear()
    _OVERRIDES.clear()


def loader_config(loader: Any) -> dict:
    """The settings a DataLoader really got (after its own defaults and validation)."""
    dataset = loader.dataset
    try:
        dataset_len = len(dataset)
    except Exception:
        dataset_len = None
    context = loader.multiprocessing_context
    if context is None:
        start_method = (
            multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()
        )
    else:
        start_method = context if isinstance(context, str) else context.get_start_method()
    collate = loader.collate_fn
    batch_size = loader.batch_size
    if batch_size is None:
        # accelerate re-creates a Trainer's DataLoader with a batch_sampler (its BatchSamplerShard knows the size).
        batch_size = getattr(loader.batch_sampler, "batch_size", None)
    return {
        "num_workers": loader.num_workers,
        "batch_size": batch_size if isinstance(batch_size, int) and not isinstance(batch_size, bool) else None,
        "pin_memory": bool(loader.pin_memory),
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": bool(loader.persistent_workers),
        "drop_last": bool(loader.drop_last),
        "timeout_s": loader.timeout,
        "in_order": bool(getattr(loader, "in_order", True)),
        "start_method": start_method if loader.num_workers > 0 else None,
        "dataset": f"{type(dataset).__module__}.{type(dataset).__qualname__}",
        "dataset_len": dataset_len,
        "iterable_dataset": loader._dataset_kind == 1,
        "dataset_shards": dataset_shards(dataset) if loader._dataset_kind == 1 else None,
        "sampler": type(loader.sampler).__qualname__ if loader.sampler is not None else None,
        "collate_fn": getattr(collate, "__qualname__", type(collate).__qualname__),
        "created_by": created_by(),
    }


def dataset_shards(dataset: Any) -> int | None:
    """The shards an iterable dataset says it has: a Hugging Face ``datasets.IterableDataset``'s ``n_shards`` (or
    ``num_shards``), or any dataset's int ``n_shards``; None where it says nothing. Workers beyond the shards have
    nothing to read."""
    mro = type(dataset).__mro__
    hugging_face = any(c.__name__ == "IterableDataset" and c.__module__.split(".")[0] == "datasets" for c in mro)
    for name in ("n_shards", "num_shards") if hugging_face else ("n_shards",):
        try:  # a property of the dataset's source, cheap; a user's __getattr__ may raise anything
            shards = getattr(dataset, name, None)
        except Exception:
            continue
        if isinstance(shards, int) and not isinstance(shards, bool) and shards >= 0:
            return shards
    return None


def created_by() -> str | None:
    """The training framework creating a DataLoader now (called inside its ``__init__``), or None for the user's own
    code."""
    found = set()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if isinstance(module, str):
            for prefix, name in FRAMEWORK_MODULES:
                if module.startswith(prefix) or module == prefix.rstrip("."):
                    found.add(name)
        frame = frame.f_back
    return next((name for _, name in FRAMEWORK_MODULES if name in found), None)


def apply_overrides(init: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict, int | None]:
    """Apply ``dlprof sweep``'s ``num_workers`` to the arguments of a DataLoader's ``init``; returns the arguments
    and what the script asked for (None when nothing is imposed)."""
    wanted = _OVERRIDES.get("num_workers")
    if wanted is None:
        return args, kwargs, None
    bound = inspect.signature(init).bind(None, *args, **kwargs)
    arguments = bound.arguments
    requested = arguments.get("num_workers", 0)
    arguments["num_workers"] = wanted
    if wanted == 0:  # DataLoader rejects these without workers
        arguments.pop("prefetch_factor", None)
        arguments["persistent_workers"] = False
    return bound.args[1:], bound.kwargs, requested


def register(loader: Any, requested: int | None) -> LoaderRecord:
    """Add a DataLoader just built to the registry, with the ``num_workers`` the script asked for."""
    record = LoaderRecord(loader_id=len(LOADERS), config={**loader_config(loader), "num_workers_requested": requested})
    record.loader_ref = weakref.ref(loader)
    LOADERS.append(record)
    loader._dlprof_loader_id = record.loader_id
    return record


def record_of(loader: Any) -> LoaderRecord | None:
    """The registry's record of a DataLoader (None: built before install, or its settings could not be read)."""
    loader_id = loader.__dict__.get("_dlprof_loader_id")
    return None if loader_id is None else LOADERS[loader_id]
