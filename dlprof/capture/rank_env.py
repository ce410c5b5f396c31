"""Where this process stands in a distributed run, as its launcher told it through the environment.

torchrun, ``accelerate launch`` and deepspeed set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE`` in each rank's environment; a plain ``python train.py`` sets none of them and is
rank 0 of 1. Read once, when a process starts recording, and handed to the recorder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


def env_int(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """An integer from the environment, ``default`` when unset or malformed."""
    try:
        return int((os.environ if environ is None else environ).get(name, ""))
    except ValueError:
        return default


@dataclass(frozen=True)
class RankEnv:
    """This process's rank, and the ranks of the run and of its machine."""

    rank: int = 0
    world_size: int = 1
    #: Rank among the processes of this machine: local rank 0 calibrates the machine for all of them.
    local_rank: int = 0
    #: Ranks on this machine: they share its cores and RAM.
    local_world_size: int = 1

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RankEnv:
        """The rank environment of this process (``os.environ``), or of ``environ``."""
        return cls(
            rank=env_int("RANK", 0, environ),
            world_size=env_int("WORLD_SIZE", 1, environ),
            local_rank=env_int("LOCAL_RANK", 0, environ),
            local_world_size=env_int("LOCAL_WORLD_SIZE", 1, environ),
        )
