"""Every event name and category pattern dlprof relies on, across Kineto versions and vendors.

Old Kineto traces spell categories differently (``Kernel`` vs ``kernel``, ``Memcpy`` vs
``gpu_memcpy``, ``Runtime`` vs ``cuda_runtime``); categories are compared lower-cased.
"""

from __future__ import annotations

import re

from dlprof.core import schema

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
#: Before the engine's prefix (PyTorch 1.8/1.9 Kineto traces): the autograd nodes themselves,
#: ``CudnnConvolutionBackward``, ``ReluBackward1``, ``AddmmBackward``, and gradient accumulation.
OLD_BACKWARD_NODE = re.compile(r"[A-Za-z0-9_]+Backward\d*")
OLD_ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
#: Host ops that copy a tensor; one that launches a host-to-device memcpy is counted as H2D time.
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::pin_memory", "aten::_pin_memory"})
#: Runtime calls that queue a copy (CUDA and ROCm spellings).
MEMCPY_RUNTIME_PREFIXES = ("cudaMemcpy", "hipMemcpy", "cuMemcpy")
#: Device-side host-to-device copies: "Memcpy HtoD (Pageable -> Device)", "(Pinned -> Device)",
#: "(Host -> Device)" on ROCm.
H2D_MEMCPY_PREFIX = "Memcpy HtoD"
PINNED_MARK = "Pinned"
#: Collectives on the host: c10d's dispatcher ops (``c10d::allreduce_``) and the backends' own
#: annotations (``gloo:all_reduce``, ``nccl:all_reduce``); ``record_param_comms`` on newer torch.
COLLECTIVE_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms")
#: NCCL's (and RCCL's) device kernels: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``, ``ncclKernel_...``.
COLLECTIVE_KERNEL_PREFIX = "nccl"


def category(event: dict) -> str:
    return category_of(event.get("cat", ""))


def category_of(cat: object) -> str:
    """An event's ``cat`` as compared: lower-cased (old traces write ``Kernel``, ``Memcpy``, ``Runtime``).

    A list or object is no category (and is never turned into text: it may nest deeper than ``str`` recurses).
    """
    if type(cat) is str:
        return cat.lower()
    return "" if isinstance(cat, (list, dict)) else str(cat).lower()


def is_profiler_step(name: str) -> bool:
    return name.startswith(PROFILER_STEP_PREFIX)


def step_number(name: str) -> int | None:
    try:
        return int(name[len(PROFILER_STEP_PREFIX) :])
    except ValueError:
        return None


def is_dataloader_next(name: str) -> bool:
    """``enumerate(DataLoader)#..__next__`` (single- or multi-process iterator)."""
    return schema.is_dataloader_next(name)


def is_optimizer(name: str) -> bool:
    return name.startswith(OPTIMIZER_PREFIXES)


def is_backward(name: str) -> bool:
    """Autograd engine work: ``autograd::engine::evaluate_function: ...`` (PyTorch >= 1.10) or an old trace's bare
    node."""
    return (
        name.startswith(BACKWARD_PREFIX) or name == OLD_ACCUMULATE_GRAD or OLD_BACKWARD_NODE.fullmatch(name) is not None
    )


def is_h2d_memcpy(name: str) -> bool:
    return name.startswith(H2D_MEMCPY_PREFIX)


def is_memcpy_runtime(name: str) -> bool:
    return name.startswith(MEMCPY_RUNTIME_PREFIXES)


def is_collective(name: str) -> bool:
    return name.startswith(COLLECTIVE_PREFIXES)


def is_collective_kernel(name: str) -> bool:
    return name.startswith(COLLECTIVE_KERNEL_PREFIX)


def collective_kind(name: str) -> str:
    """``c10d::allreduce_`` / ``gloo:all_reduce`` / ``nccl:all_reduce`` / ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` ->
    ``all_reduce``."""
    if is_collective_kernel(name) and "_" in name:
        name = name.split("_")[1]  # ncclDevKernel_AllReduce_... -> AllReduce
    kind = name.split(":")[-1].strip("_").lower()
    for plain, spelled in (
        ("allreduce", "all_reduce"),
        ("allgather", "all_gather"),
        ("reduce_scatter", "reduce_scatter"),
        ("alltoall", "all_to_all"),
    ):
        if kind.startswith(plain):
            return spelled + kind[len(plain) :]
    return kind
