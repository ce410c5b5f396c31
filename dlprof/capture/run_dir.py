"""The run directory: its name, claiming it for one record, its session settings, and removing it when nothing was
recorded.

A run directory either holds finished traces (one per rank that trained) or nothing at all: while a
record runs, its scratch files live in :data:`dlprof.schema.SCRATCH_DIR` inside it, created
exclusively, so two records never share one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from dlprof import schema
from dlprof.capture.session import CONFIG_FILE
from dlprof.errors import InputError, UsageError
from dlprof.results.record import RecordRequest

_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: What a run name may hold, for messages.
RUN_NAME_RULE = "use letters, digits, '.', '_' and '-' only"


def is_run_name(name: str) -> bool:
    """Whether ``name`` can name a run directory (letters, digits, ``.``, ``_``, ``-``; not starting with a dot)."""
    return _RUN_NAME.match(name) is not None


def _script_of(command: Sequence[str]) -> str | None:
    """The first script or module the command's interpreter runs, else the command's own name (torchrun, swift)."""
    for i, word in enumerate(command):
        if word == "-m" and i + 1 < len(command):
            return command[i + 1].rsplit(".", 1)[-1]
        if word.endswith(".py"):
            path = Path(word)
            return path.parent.name if path.stem == "__main__" else path.stem  # a package's __main__.py: the package
    return Path(command[0]).name if command else None


def default_run_name(command: Sequence[str], out_dir: Path, prefix: str = "", fallback: str = "run") -> str:
    """``<prefix><script>-<date>-<time>``, made unique in ``out_dir``: the name of a run nobody named.

    ``<script>`` is what ``command`` runs (``train`` for ``python train.py``, ``lora`` for ``python -m
    dlprof.workloads.lora``, ``swift`` for ``swift sft ...``), else ``fallback``, cleaned so that any
    script name (spaces, ``my träin (v2).py``) gives a name that :func:`is_run_name` accepts.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", _script_of(command) or fallback).strip("._-") or "run"
    return unique_run_name(out_dir, f"{prefix}{safe}")


def unique_run_name(out_dir: Path, stem: str) -> str:
    """``<stem>-<date>-<time>``, with ``-2``, ``-3``, ... added when ``out_dir`` already holds that name."""
    base = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    name, n = base, 1
    while (out_dir / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def _claim(run_dir: Path) -> str | None:
    """Make ``run_dir`` this record's (its scratch folder, created exclusively); else why it is taken."""
    if run_dir.exists() and any(run_dir.glob("*" + schema.TRACE_SUFFIX)):
        return "already holds a recorded run"
    scratch = run_dir / schema.SCRATCH_DIR
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        scratch.mkdir()  # exclusive: two records never share a scratch folder
    except FileExistsError:
        owner = schema.scratch_owner(scratch)
        if owner is not None and owner != os.getpid():
            return f"is being recorded by another dlprof record (pid {owner})"
        return f"holds the scratch files of a record that did not finish ({scratch}); delete that folder"
    except OSError as error:
        raise InputError(
            f"{run_dir}: cannot create the run directory ({error.strerror}); choose a writable --out"
        ) from None
    try:
        (scratch / schema.SCRATCH_OWNER_FILE).write_text(json.dumps({"pid": os.getpid()}))
    except OSError as error:
        remove_unrecorded(run_dir)
        raise InputError(f"{run_dir}: cannot write there ({error.strerror}); choose another --out") from None
    return None


def prepare_run_dir(
    out_dir: Path, name: str, fresh_name_if_taken: bool = False, fix: str = "choose another --name"
) -> Path:
    """Create ``out_dir/name`` and its scratch folder for this record alone.

    A name in use (a finished run, or one being written) gets a fresh name (``-2``, ``-3``, ...) when
    the user did not choose it (``fresh_name_if_taken``), else a one-line error that ends with ``fix``.

    Raises:
        UsageError: the name is taken, or is no run name.
        InputError: the directory cannot be created or written.
    """
    if not is_run_name(name):
        raise UsageError(f"--name {name!r}: {RUN_NAME_RULE}")
    candidate, n = name, 1
    while True:
        run_dir = out_dir / candidate
        taken = _claim(run_dir)
        if taken is None:
            return run_dir
        if not fresh_name_if_taken:
            raise UsageError(f"{run_dir}: {taken}; {fix}")
        n += 1
        candidate = f"{name}-{n}"


def write_session_config(scratch: Path, request: RecordRequest) -> dict:
    """Write (and return) what every recording process of this run reads at start-up (:mod:`dlprof.capture.session`)."""
    config = {
        "schedule": {"wait": request.wait, "warmup": request.warmup, "active": request.active},
        "loader_spans": request.loader_spans,
        "reference_steps": request.reference_steps,
        "run_to_end": request.run_to_end,
        "overrides": request.overrides or {},
        "trials": asdict(request.trials) if request.trials is not None else None,
    }
    (scratch / CONFIG_FILE).write_text(json.dumps(config))
    return config


def remove_unrecorded(run_dir: Path) -> None:
    """Remove a run directory that holds no trace (its scratch files too): nothing may look like a run."""
    shutil.rmtree(run_dir / schema.SCRATCH_DIR, ignore_errors=True)
    try:
        run_dir.rmdir()
    except OSError:
        pass  # it holds something else
