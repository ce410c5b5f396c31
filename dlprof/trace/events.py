"""Every event name and category pattern dlprof relies on, across Kineto versions and vendors.

Old Kineto traces spell categories differently (``Kernel`` vs ``kernel``, ``Memcpy`` vs
``gpu_memcpy``, ``Runtime`` vs ``cuda_runtime``); categories are compared lower-cased.
"""
from __future__ import annotations

from dlprof import schema

KERNEL_CATEGORIES = frozenset({"kernel"})
MEMCPY_CATEGORIES = frozenset({"gpu_memcpy", "memcpy"})
MEMSET_CATEGORIES = frozenset({"gpu_memset", "memset"})
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "runtime", "cuda_driver", "hip_runtime"})
HOST_OP_CATEGORIES = frozenset({"cpu_op", "operator", "user_annotation"})
GPU_CATEGORIES = KERNEL_CATEGORIES | MEMCPY_CATEGORIES | MEMSET_CATEGORIES

PROFILER_STEP_PREFIX = "ProfilerStep#"
#: In the ``__next__`` event's name when the DataLoader had no workers (else ``_MultiProcessingDataLoaderIter``).
SINGLE_PROCESS_ITERATOR = "_SingleProcessDataLoaderIter"
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
#: Host ops that copy a tensor; one that launches a host-to-device memcpy is counted as H2D time.
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::pin_memory", "aten::_pin_memory"})
#: Runtime calls that queue a copy (CUDA and ROCm spellings).
MEMCPY_RUNTIME_PREFIXES = ("cudaMemcpy", "hipMemcpy", "cuMemcpy")
#: Device-side host-to-device copies: "Memcpy HtoD (Pageable -> Device)", "(Pinned -> Device)",
#: "(Host -> Device)" on ROCm.
H2D_MEMCPY_PREFIX = "Memcpy HtoD"
PINNED_MARK = "Pinned"


def category(event: dict) -> str:
    return str(event.get("cat", "")).lower()


def is_profiler_step(name: str) -> bool:
    return name.startswith(PROFILER_STEP_PREFIX)


def step_number(name: str) -> int | None:
    try:
        return int(name[len(PROFILER_STEP_PREFIX):])
    except ValueError:
        return None


def is_dataloader_next(name: str) -> bool:
    """``enumerate(DataLoader)#..__next__`` (single- or multi-process iterator)."""
    return schema.is_dataloader_next(name)


def is_optimizer(name: str) -> bool:
    return name.startswith(OPTIMIZER_PREFIXES)


def is_backward(name: str) -> bool:
    return name.startswith(BACKWARD_PREFIX)


def is_h2d_memcpy(name: str) -> bool:
    return name.startswith(H2D_MEMCPY_PREFIX)


def is_memcpy_runtime(name: str) -> bool:
    return name.startswith(MEMCPY_RUNTIME_PREFIXES)
