"""What a recording says of its machine and its stack: the host's cores, memory, GPU, shared memory and thread settings,
the versions that shaped the trace, this machine's hand-off and worker start-up costs, and each DataLoader's settings
as it really got them.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from dataclasses import replace

import torch

from dlprof.capture import probe
from dlprof.capture.calibrate import measure_handoff, measure_worker_startup
from dlprof.core.manifest import Epoch, Gpu, Handoff, Host, LoaderConfig, WorkerStartup
from dlprof.core.version import __version__

#: Where DataLoader workers put the batches they hand over (torch's shared memory, a tmpfs on Linux); tests point it
#: at a filesystem of known size.
SHM_PATH = "/dev/shm"


def shm_space(path: str | None = None) -> tuple[int, int] | None:
    """Total and free bytes of the filesystem at ``path`` (default :data:`SHM_PATH`); None where there is none."""
    try:
        stat = os.statvfs(path if path is not None else SHM_PATH)
    except (OSError, AttributeError):  # no /dev/shm (not Linux, a bare container), or no statvfs (Windows)
        return None
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


def host_facts(shm: tuple[int, int] | None = None) -> Host:
    """Usable cores, memory and GPU of this machine, as the training process sees them, with ``/dev/shm``'s total and
    free bytes as :func:`shm_space` read them when the recording began, and the thread settings of its environment."""
    import psutil

    memory = psutil.virtual_memory()
    gpu = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        gpu = Gpu(
            name=props.name,
            count=torch.cuda.device_count(),
            memory_mib=props.total_memory // 2**20,
            cuda=torch.version.cuda,
            hip=getattr(torch.version, "hip", None),
        )
    return Host(
        hostname=socket.gethostname(),
        usable_cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        cpu_count=os.cpu_count(),
        ram_total_mib=memory.total // 2**20,
        ram_available_mib=memory.available // 2**20,
        gpu=gpu,
        # Intra-op threads: on a CPU device, training itself uses this many cores.
        torch_threads=torch.get_num_threads(),
        platform=platform.platform(),
        shm_total_bytes=shm[0] if shm is not None else None,
        shm_free_bytes=shm[1] if shm is not None else None,
        # How workers hand tensors over: file_descriptor (an open descriptor each) or file_system (named files).
        sharing_strategy=torch.multiprocessing.get_sharing_strategy(),
        # The thread pools' sizes, read when the training ends: a script may set them itself before it forks.
        tokenizers_parallelism=os.environ.get("TOKENIZERS_PARALLELISM"),
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        mkl_num_threads=os.environ.get("MKL_NUM_THREADS"),
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
    )


def versions() -> dict[str, str]:
    """Versions of the stack that shaped the trace; packages the script never imported are left out."""
    found = {"dlprof": __version__, "python": platform.python_version(), "torch": torch.__version__}
    for name in ("transformers", "peft", "tokenizers", "accelerate"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = getattr(module, "__version__", "unknown")
    return found


def calibrate(host: Host) -> Host:
    """``host`` with this machine's DataLoader hand-off and worker start-up costs (``None`` where they cannot be
    measured)."""
    handoff, startup = measure_handoff(), measure_worker_startup()
    return replace(
        host,
        handoff=Handoff(**handoff) if handoff is not None else None,
        worker_startup=WorkerStartup(**startup) if startup is not None else None,
    )


def loader_config(record: probe.LoaderRecord) -> LoaderConfig:
    """One DataLoader the process created, with its settings as the DataLoader really got them."""
    return LoaderConfig(
        id=record.loader_id,
        iterations=record.iterations,
        batches=record.batches,
        length=record.length,
        epochs=tuple(Epoch(**epoch.as_manifest()) for epoch in record.epochs),
        **record.config,
    )
