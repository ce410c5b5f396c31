"""Which job a ``dlprof record`` belongs to, from what the launcher shares with every node.

A job over several machines runs one ``dlprof record`` per node. Records of one job recognise each other by a
key that every node's command line or environment holds alike; in this order of precedence:

1. the rendezvous id on the command line (torchrun's ``--rdzv-id``/``--rdzv_id``; torchrun's default ``none`` is no
   id);
2. ``TORCHELASTIC_RUN_ID`` in the environment (set by a scheduler, or by torchrun for the processes it starts);
3. the rendezvous endpoint: ``--rdzv-endpoint`` on the command line, else ``--master-addr``/``--master-port``
   (accelerate's ``--main_process_ip``/``--main_process_port``), else ``MASTER_ADDR``/``MASTER_PORT`` in the
   environment. It must be spelled the same on every node (``node0:29500`` and ``10.0.0.1:29500`` differ).

With a key, each node keeps its own scratch folder in the shared run directory (:mod:`dlprof.capture.run_dir`) and the
key is written into every trace's manifest (``job``), so that run directories written node by node are recognised as
one run by ``dlprof analyze``. Without one, a record is a job of its own, as before.

Standard library only: parsed before anything runs.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: torchrun's default ``--rdzv-id``: every job has it, so it tells no job from another.
_NO_ID = "none"
_ID_OPTIONS = ("rdzv-id",)
_ENDPOINT_OPTIONS = ("rdzv-endpoint",)
_ADDR_OPTIONS = ("master-addr", "main-process-ip")
_PORT_OPTIONS = ("master-port", "main-process-port")
#: How many machines (``--nnodes 2``, ``--nnodes 1:4``; accelerate's ``--num_machines``, deepspeed's ``--num_nodes``).
_NODES_OPTIONS = ("nnodes", "num-machines", "num-nodes")
#: This machine's place among them (torchrun's and deepspeed's ``--node_rank``, accelerate's ``--machine_rank``).
_NODE_RANK_OPTIONS = ("node-rank", "machine-rank")


@dataclass(frozen=True)
class Job:
    """The job a record belongs to: its key, where the key came from, and what the command says about nodes."""

    #: What every node of the job shares: ``rdzv-id=JOB``, ``run-id=ID`` or ``endpoint=HOST:PORT``.
    key: str
    #: Where the key was found: ``--rdzv-id``, ``TORCHELASTIC_RUN_ID``, ``--rdzv-endpoint``, ...
    source: str
    #: Machines the command asks for (the most, for a range ``1:4``); None when it does not say.
    nodes: int | None = None
    #: This machine's rank among them; None when the command does not say.
    node_rank: int | None = None

    @property
    def multi_node(self) -> bool:
        """The command says it runs on more than one machine."""
        return (self.nodes is not None and self.nodes > 1) or (self.node_rank is not None and self.node_rank > 0)

    @property
    def digest(self) -> str:
        """The key as written into a redacted trace: the same on every node, and no host name in it."""
        return "sha256:" + hashlib.sha256(self.key.encode()).hexdigest()[:16]


def _options(command: Sequence[str]) -> dict[str, str]:
    """The launcher's ``--option value`` and ``--option=value`` pairs, ``_`` read as ``-``, up to the script.

    The script's own arguments (after the first ``*.py``) are not the launcher's: they are left out.
    """
    found: dict[str, str] = {}
    words = list(command)
    for i, word in enumerate(words):
        if word.endswith(".py") and i > 0:
            break
        if not word.startswith("--"):
            continue
        name, eq, value = word[2:].partition("=")
        if not eq:
            if i + 1 >= len(words) or words[i + 1].startswith("--"):
                continue
            value = words[i + 1]
        found.setdefault(name.replace("_", "-"), value)
    return found


def _first(options: Mapping[str, str], names: Sequence[str]) -> tuple[str, str] | None:
    """The first of ``names`` that ``options`` holds, and its value."""
    return next(((name, options[name]) for name in names if options.get(name)), None)


def _int(text: str | None) -> int | None:
    """``"2"`` → 2, ``"1:4"`` → 4 (the most machines), else None."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(?:\d+\s*:\s*)?(\d+)\s*", text)
    return int(match.group(1)) if match else None


def _key(options: Mapping[str, str], environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The job's key and where it came from, by the precedence in the module's docstring; None without one."""
    given = _first(options, _ID_OPTIONS)
    if given and given[1].strip().lower() != _NO_ID:
        return f"rdzv-id={given[1].strip()}", f"--{given[0]}"
    run_id = environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if run_id and run_id.lower() != _NO_ID:
        return f"run-id={run_id}", "TORCHELASTIC_RUN_ID"
    given = _first(options, _ENDPOINT_OPTIONS)
    if given:
        return f"endpoint={given[1].strip()}", f"--{given[0]}"
    addr, port = _first(options, _ADDR_OPTIONS), _first(options, _PORT_OPTIONS)
    if addr and port:
        return f"endpoint={addr[1].strip()}:{port[1].strip()}", f"--{addr[0]} and --{port[0]}"
    if environ.get("MASTER_ADDR") and environ.get("MASTER_PORT"):
        return f"endpoint={environ['MASTER_ADDR'].strip()}:{environ['MASTER_PORT'].strip()}", "MASTER_ADDR/MASTER_PORT"
    return None


def find_job(command: Sequence[str], environ: Mapping[str, str] | None = None) -> Job | None:
    """The job ``command`` belongs to, from its launcher's options and ``environ`` (``os.environ``); None when
    neither names one (a single process, ``torchrun --standalone``)."""
    environ = os.environ if environ is None else environ
    options = _options(command)
    key = _key(options, environ)
    if key is None:
        return None
    nodes, node_rank = _first(options, _NODES_OPTIONS), _first(options, _NODE_RANK_OPTIONS)
    return Job(key[0], key[1], _int(nodes[1]) if nodes else None, _int(node_rank[1]) if node_rank else None)
