"""On a CUDA machine: the built-in workload records GPU activity, host-to-device copies and pinned memory."""

from __future__ import annotations

import pytest
from conftest import SMALL_WORKLOAD, load_trace, run_dlprof

from dlprof.core import schema

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_cuda_run_has_kernels_copies_and_pinned_loader(tmp_path):
    done = run_dlprof(
        "record", "--out", str(tmp_path), "--name", "cuda", *SMALL_WORKLOAD, "--num-workers", "2", "--device", "cuda"
    )
    assert done.returncode == 0, done.stderr
    doc = load_trace(tmp_path / "cuda")
    manifest = doc[schema.MANIFEST_KEY]
    assert manifest["host"]["gpu"] is not None and manifest["host"]["gpu"]["memory_mib"] > 0
    assert manifest["loader"]["pin_memory"] is True  # the workload pins by default on CUDA
    cats = {str(e.get("cat", "")).lower() for e in doc["traceEvents"] if e.get("ph") == "X"}
    assert "kernel" in cats and "gpu_memcpy" in cats
    copies = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("name", "")).startswith("Memcpy HtoD")]
    assert copies and any("Pinned" in e["name"] for e in copies)
