"""Facts of one collated batch, measured in the process that made it: tokens and padding, bytes, a fingerprint.

Runs once per batch on the probe's hot path (a DataLoader worker, or the main process at ``num_workers=0``), so
everything is one or two reductions over whole tensors and a checksum of a bounded sample of the batch's bytes: no
Python loop over elements. torch is taken from ``sys.modules``, never imported: a batch of tensors means
it is loaded, and a process without one must not pay for importing it.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Mapping
from typing import Any, NamedTuple

#: How real tokens were told from padding: the span record's name field, an index into
#: :data:`spanfile.PADDING_SOURCES`.
SOURCE_NONE, SOURCE_MASK, SOURCE_LABELS, SOURCE_PAD_ID = 0, 1, 2, 3
#: Labels at this value are ignored by the loss (PyTorch's ``CrossEntropyLoss`` default).
IGNORE_INDEX = -100
#: Containers nested deeper than this, or past this many values in all, are not searched for tensors.
MAX_DEPTH = 4
MAX_VALUES = 1024
#: The fingerprint samples this many bytes of a tensor, strided across it: of the token tensor where the batch has
#: one (the other token tensors follow from it), else of each of the first ``SAMPLED_TENSORS`` tensors.
SAMPLE_BYTES = 1024
SAMPLED_TENSORS = 4
_MASK64 = (1 << 64) - 1
#: Label rows' positions plus one, by width: the last labelled position is a max over them.
_POSITIONS: dict[int, Any] = {}


class Facts(NamedTuple):
    """One batch, measured. ``rows`` is 0 where it had no token tensor (the token counts are then 0)."""

    source: int  # SOURCE_*
    real_tokens: int
    rows: int
    width: int
    longest: int
    nbytes: int
    #: A checksum of the tensors' shapes and a sample of their bytes as a signed 64-bit int (never 0); 0 where the
    #: bytes are not readable here (not in CPU memory, or numpy missing).
    fingerprint: int
    tensors: int


def pad_token_id(collate_fn: Any) -> int | None:
    """The pad token id a ``collate_fn`` pads with, where it says: its ``tokenizer`` or ``processing_class`` (Hugging
    Face collators), its own ``pad_token_id``, or those given to a ``functools.partial``; else None."""
    try:
        keywords = getattr(collate_fn, "keywords", None)
        holders = [collate_fn]
        if isinstance(keywords, dict):
            holders += [keywords.get("tokenizer"), keywords.get("processing_class")]
        for holder in (h for h in holders if h is not None):
            for owner in (getattr(holder, "tokenizer", None), getattr(holder, "processing_class", None), holder):
                pad = getattr(owner, "pad_token_id", None)
                if isinstance(pad, int) and not isinstance(pad, bool):
                    return pad
        if isinstance(keywords, dict):
            pad = keywords.get("pad_token_id", keywords.get("pad_id"))
            if isinstance(pad, int) and not isinstance(pad, bool):
                return pad
    except Exception:  # a user object's attribute may raise anything: no pad id then
        return None
    return None


def _collect(obj: Any, tensor_type: type, tensors: list, mappings: list, depth: int, budget: list[int]) -> None:
    if isinstance(obj, tensor_type):
        tensors.append(obj)
        return
    if depth >= MAX_DEPTH or budget[0] <= 0:
        return
    if isinstance(obj, (dict, Mapping)):  # dict first: the common case, matched without the ABC check
        values: Any = obj.values()
        mappings.append(obj)
    elif isinstance(obj, (list, tuple)):
        values = obj
    else:
        return
    budget[0] -= len(values)
    for value in values:
        _collect(value, tensor_type, tensors, mappings, depth + 1, budget)


def _token_tensor(torch: Any, tensors: list, mappings: list) -> tuple[Any, Any]:
    """The batch's token tensor and the mapping that holds it (None: not in a mapping, or no token tensor)."""
    integers = (torch.int64, torch.int32, torch.int16)
    for fields in mappings:
        ids = fields.get("input_ids")
        if isinstance(ids, torch.Tensor) and ids.ndim == 2 and ids.dtype in integers:
            return ids, fields
    for ids in tensors:
        if ids.ndim == 2 and ids.dtype in integers:
            return ids, next((m for m in mappings if any(v is ids for v in m.values())), None)
    return None, None


def _same_shape(torch: Any, fields: Any, key: str, shape: Any) -> Any:
    value = fields.get(key) if fields is not None else None
    return value if isinstance(value, torch.Tensor) and value.shape == shape else None


def _tokens(torch: Any, np: Any, ids: Any, fields: Any, pad_id: int | None) -> tuple[int, int, int]:
    """(source, real tokens, longest real sequence) of a 2-D token tensor.

    Counting runs in numpy where it is loaded: torch's elementwise compare of an integer tensor costs several times
    numpy's on a CPU, and the fingerprint uses numpy too (a library's first call in a batch costs the most).
    """
    mask = _same_shape(torch, fields, "attention_mask", ids.shape)
    if mask is not None:
        source = SOURCE_MASK
        try:
            lengths = mask.numpy().sum(1)
        except (AttributeError, TypeError, RuntimeError):  # no numpy, a dtype it lacks, or not in CPU memory
            lengths = mask.sum(1)
    else:
        labels = _same_shape(torch, fields, "labels", ids.shape)
        if labels is not None:
            # A row's real tokens run to its last labelled position: prompts are ignored too, but they are real.
            source = SOURCE_LABELS
            if np is not None and labels.is_cpu:
                valid = labels.numpy() != IGNORE_INDEX
                lengths = (valid.shape[1] - valid[:, ::-1].argmax(1)) * valid.any(1)
            else:
                lengths = ((labels != IGNORE_INDEX) * _positions(torch, ids.shape[1])).amax(1)
        elif pad_id is not None:
            source = SOURCE_PAD_ID
            if np is not None and ids.is_cpu:
                lengths = (ids.numpy() != pad_id).view(np.uint8).sum(1, dtype=np.int64)
            else:
                lengths = (ids != pad_id).sum(1)
        else:
            rows, width = ids.shape
            return SOURCE_NONE, rows * width, width if rows else 0
    if ids.shape[0] <= 256:
        counts = lengths.tolist()
        return source, int(sum(counts)), int(max(counts, default=0))
    return source, int(lengths.sum()), int(lengths.max())


def _positions(torch: Any, width: int) -> Any:
    """1 .. width as a tensor, kept for the widths seen last."""
    positions = _POSITIONS.get(width)
    if positions is None:
        if len(_POSITIONS) >= 64:
            _POSITIONS.clear()
        positions = _POSITIONS[width] = torch.arange(1, width + 1, dtype=torch.int32)
    return positions


def _layout(tensors: list) -> tuple[int, tuple]:
    """(bytes of the tensors, each tensor's memory once: what a worker hands over through shared memory; their
    shapes)."""
    total, seen, shapes = 0, set(), []
    for t in tensors:
        shapes.append(t.shape)
        address = t.data_ptr()
        if address not in seen or not address:
            seen.add(address)
            total += t.nbytes
    return total, tuple(shapes)


def _fingerprint(torch: Any, np: Any, sampled: list, shapes: tuple) -> int:
    """A checksum of ``shapes`` and of up to :data:`SAMPLE_BYTES` of each sampled tensor, taken strided across it; 0
    where a tensor's bytes are not readable here."""
    crc, adler = 0, 1
    for t in sampled:
        if not t.is_cpu:
            return 0
        if not t.is_contiguous() and t.untyped_storage().nbytes() != t.nbytes:
            return 0  # a strided slice: flattening it would copy it whole
        try:
            values = t.numpy()
        except TypeError:  # a dtype numpy lacks (bfloat16): its bytes all the same
            values = t.view(torch.uint8).numpy()
        flat = values.ravel(order="K")  # memory order: a view, also of a permuted layout (channels_last)
        most = max(1, SAMPLE_BYTES // values.itemsize)
        sample = flat[:: max(1, flat.size // most)][:most].tobytes()
        crc, adler = zlib.crc32(sample, crc), zlib.adler32(sample, adler)
    # Two different checksums make 64 bits; a tuple of ints hashes alike in every process (a string does not).
    digest = (crc << 32 | adler) ^ (hash(shapes) & _MASK64)
    return (digest - (1 << 64) if digest >= 1 << 63 else digest) or 1


def measure(batch: Any, pad_id: int | None = None) -> Facts:
    """Measure one batch a ``collate_fn`` returned. May raise on an exotic batch: the caller skips it then."""
    torch = sys.modules.get("torch")
    tensors: list = []
    mappings: list = []
    if torch is not None:
        _collect(batch, torch.Tensor, tensors, mappings, 0, [MAX_VALUES])
    if not tensors:
        return Facts(SOURCE_NONE, 0, 0, 0, 0, 0, 0, 0)
    np = sys.modules.get("numpy")
    ids, fields = _token_tensor(torch, tensors, mappings)
    if ids is None:
        source = real = rows = width = longest = 0
    else:
        rows, width = ids.shape
        source, real, longest = _tokens(torch, np, ids, fields, pad_id)
    nbytes, shapes = _layout(tensors)
    sampled = [ids] if ids is not None else tensors[:SAMPLED_TENSORS]
    fingerprint = _fingerprint(torch, np, sampled, shapes) if np is not None else 0
    return Facts(source, real, rows, width, longest, nbytes, fingerprint, len(tensors))
