"""Batches trimmed to their longest real sequence, in the main process: the trials' padding segment.

A batch padded to a fixed width carries columns past its longest real sequence, where every row is masked out
(``attention_mask`` 0). Dropping those columns leaves the loss as it was when the loss ignores them too: ``labels``
of the batch's width are :data:`IGNORE_INDEX` there (the ignore index of PyTorch's and Hugging Face's losses), or the
labels are one per row (a classification, which the mask alone keeps from the padding). Padding on the right only:
with a causal or masked model, no kept position attends to a dropped one, so the outputs the loss reads are the same.
Anything else (no mask, no labels, labels that count padded positions, a tensor with the width in another dimension,
a batch that is not a mapping) is not trimmed, and the first reason is kept for the report.

The main process checks the first :data:`CHECKED_BATCHES` batches of each loader as they are handed to the script
(:func:`check`), which tells the trials whether a padding segment is worth planning; during that segment
:func:`trimmed` hands the script each batch cut to its longest sequence (views, no copy).
"""

from __future__ import annotations

import copy
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

#: The label of a position the loss ignores (``torch.nn.CrossEntropyLoss``'s default, Hugging Face's collators').
IGNORE_INDEX = -100
#: Batches checked per loader, the first ones: how a loader pads shows in its first batches, and checking every batch
#: would cost the training a reduction over the mask each step for nothing.
CHECKED_BATCHES = 64

#: Loaders whose batches are trimmed now (the trials' padding segment), by loader id.
TRIMMING: set[int] = set()


@dataclass
class TrimCheck:
    """What checking a loader's first batches found: positions that trimming would drop, or why it cannot."""

    batches: int = 0
    #: Positions (rows x width) of the batches checked, and those past each batch's longest real sequence.
    positions: int = 0
    droppable: int = 0
    #: Why a checked batch could not be trimmed without changing the loss (the first reason; None: every one could).
    refused: str | None = None

    @property
    def droppable_pct(self) -> float:
        return 100 * self.droppable / self.positions if self.positions else 0.0


def _keep(batch: Any) -> tuple[int, int, int] | str:
    """``(rows, width, kept width)`` of a batch that can be trimmed, else why not."""
    import torch

    if not isinstance(batch, MutableMapping):
        return f"the batches are {type(batch).__name__}, not a mapping of named tensors"
    mask = batch.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        return "the batches carry no attention_mask of (rows, width): padded positions may be attended to"
    rows, width = mask.shape
    real = mask.any(dim=0).nonzero()
    keep = int(real[-1]) + 1 if len(real) else width
    labels = batch.get("labels")
    if not isinstance(labels, torch.Tensor):
        return "the batches carry no labels: the loss your script computes may count the padded positions"
    for name, value in batch.items():
        if not isinstance(value, torch.Tensor) or value.dim() < 2 or value.shape[0] != rows:
            continue
        if width in tuple(value.shape[2:]):
            return f"the batches' {name} has their width in another dimension: it cannot be cut alike"
        if value.shape[1] != width:
            continue
        if name == "labels" and keep < width and not bool((value[:, keep:] == IGNORE_INDEX).all()):
            return f"the labels count padded positions (not {IGNORE_INDEX} there): dropping them would change the loss"
    return rows, width, keep


def check(batch: Any, found: TrimCheck) -> None:
    """Count what trimming ``batch`` would drop into ``found`` (or why it cannot be trimmed)."""
    found.batches += 1
    keep = _keep(batch)
    if isinstance(keep, str):
        found.refused = found.refused or keep
        return
    rows, width, kept = keep
    found.positions += rows * width
    found.droppable += rows * (width - kept)


def trimmed(batch: Any) -> Any:
    """``batch`` with every tensor of its (rows, width) cut to its longest real sequence; ``batch`` itself when it
    cannot be trimmed without changing the loss, or has nothing to drop. The loader's batch is never changed in
    place."""
    keep = _keep(batch)
    if isinstance(keep, str) or keep[2] >= keep[1]:
        return batch
    rows, width, kept = keep
    out = copy.copy(batch)  # a dict or BatchEncoding of its own: the loader's batch stays whole
    for name, value in batch.items():
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) >= 2 and tuple(shape[:2]) == (rows, width):
            out[name] = value[:, :kept]
    return out
