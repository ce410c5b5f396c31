"""The run directory: its name, claiming it for one record, its session settings, and removing it when nothing was
recorded.

A run directory either holds finished traces (one per rank that trained) or nothing at all: while a
record runs, its scratch files live in :data:`dlprof.core.schema.SCRATCH_DIR` inside it, created
exclusively, so two records never share one. The records of the nodes of one job (:mod:`dlprof.capture.job`) share
one run directory: each node has its own scratch folder there (``.dlprof-scratch-<node>``), and writes, and on failure
removes, only its own files.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from dlprof.capture.job import Job
from dlprof.capture.session import CONFIG_FILE
from dlprof.core import schema
from dlprof.core.errors import InputError, UsageError
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


def _host() -> str:
    """This machine's name, as a file name can hold it."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", socket.gethostname()).strip("._-") or "host"


def node_name(job: Job) -> str:
    """This node's name among the records of ``job``: ``node<R>-<host>`` with the launcher's node rank, else
    ``<host>-<pid>`` (as when the rendezvous assigns the node ranks). The host is part of it because a dynamic
    rendezvous (c10d) ignores ``--node-rank``: nodes that all pass the same one are still distinct nodes."""
    return f"node{job.node_rank}-{_host()}" if job.node_rank is not None else f"{_host()}-{os.getpid()}"


def scratch_dir(run_dir: Path, job: Job | None = None) -> Path:
    """This record's scratch folder in ``run_dir``: the run's, or this node's when it records a node of ``job``."""
    return run_dir / (schema.SCRATCH_DIR if job is None else schema.node_scratch_name(node_name(job)))


def _taken_by(scratch: Path, job: Job | None, same_node: bool = False) -> str | None:
    """Why the scratch folder ``scratch`` (another record's) keeps this record out of its run directory; None when it
    is another node's of the same job (``same_node``: it is this node's own name, taken)."""
    owner = schema.read_scratch_owner(scratch)
    same_job = owner is not None and job is not None and owner.job == job.key
    if same_job and not same_node:
        return None
    mine = owner is not None and owner.pid == os.getpid() and owner.host in (None, socket.gethostname())
    if owner is not None and owner.alive and not mine:
        node = f", as {scratch.name.removeprefix(schema.SCRATCH_DIR + '-')} of this job" if same_job else ""
        return f"is being recorded by another dlprof record ({owner.where}{node})"
    return f"holds the scratch files of a record that did not finish ({scratch}); delete that folder"


def _create_scratch(run_dir: Path, scratch: Path, job: Job | None) -> str | None:
    """Create ``scratch`` with its owner file in one step (made aside, then renamed: no record ever sees a scratch
    folder without its owner); else why it is taken."""
    staging = run_dir / f".dlprof-claim-{_host()}-{os.getpid()}"
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "job": job.key if job is not None else None}
    try:
        shutil.rmtree(staging, ignore_errors=True)  # left by a process of the same pid that was killed here
        staging.mkdir()
        (staging / schema.SCRATCH_OWNER_FILE).write_text(json.dumps(owner))
        os.rename(staging, scratch)  # fails when scratch exists with files in it: the claim is exclusive
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return _taken_by(scratch, job, same_node=True)
        remove_unrecorded(run_dir, scratch)
        raise InputError(f"{run_dir}: cannot write there ({error.strerror}); choose another --out") from None
    return None


def _claim(run_dir: Path, job: Job | None = None) -> str | None:
    """Make ``run_dir`` this record's (its scratch folder, created exclusively); else why it is taken.

    A record of a node of a job shares ``run_dir`` with the other nodes of that job: each has its own scratch folder
    there; any other record is kept out, and keeps them out.
    """
    if run_dir.exists() and any(run_dir.glob("*" + schema.TRACE_SUFFIX)):
        return "already holds a recorded run"
    scratch = scratch_dir(run_dir, job)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(
            f"{run_dir}: cannot create the run directory ({error.strerror}); choose a writable --out"
        ) from None
    taken = next(
        (why for other in schema.scratch_dirs(run_dir) if other != scratch and (why := _taken_by(other, job))), None
    )
    taken = taken or _create_scratch(run_dir, scratch, job)
    if taken is None:
        # Another job's record may have claimed it at the same moment: then neither keeps it.
        rival = (why for other in schema.scratch_dirs(run_dir) if other != scratch and (why := _taken_by(other, job)))
        taken = next(rival, None)
        if taken is not None:
            remove_unrecorded(run_dir, scratch)
    return taken


def prepare_run_dir(
    out_dir: Path,
    name: str,
    fresh_name_if_taken: bool = False,
    fix: str = "choose another --name",
    job: Job | None = None,
) -> Path:
    """Create ``out_dir/name`` and its scratch folder (:func:`scratch_dir`) for this record alone, or, for a node of
    ``job``, for the records of that job's nodes.

    A name in use (a finished run, or one being written by another job) gets a fresh name (``-2``, ``-3``,
    ...) when the user did not choose it (``fresh_name_if_taken``), else a one-line error that ends with ``fix``.

    Raises:
        UsageError: the name is taken, or is no run name.
        InputError: the directory cannot be created or written.
    """
    if not is_run_name(name):
        raise UsageError(f"--name {name!r}: {RUN_NAME_RULE}")
    candidate, n = name, 1
    while True:
        run_dir = out_dir / candidate
        taken = _claim(run_dir, job)
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
        "caller_stops": request.caller_stops,
    }
    text = json.dumps(config)
    (scratch / CONFIG_FILE).write_text(text)
    return json.loads(text)  # as every process reads it (lists, not tuples), the caller's own included


def remove_unrecorded(run_dir: Path, scratch: Path | None = None) -> None:
    """Remove this record's scratch folder (``scratch``, by default the run's) and the run directory when nothing else
    is left in it: nothing may look like a run, and another node's files are never touched."""
    shutil.rmtree(scratch if scratch is not None else run_dir / schema.SCRATCH_DIR, ignore_errors=True)
    try:
        run_dir.rmdir()
    except OSError:
        pass  # it holds something else: another node's files, the user's
