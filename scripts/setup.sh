#!/usr/bin/env bash
# Install dlprof and its dependencies into the current Python environment.
# torch first, pinned: `pip install torch==2.13.0` takes the CPU wheel (any other spec may pull a
# multi-GB CUDA build); the project's own range (torch>=2.4) is then already satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pip install --quiet --disable-pip-version-check "torch==${DLPROF_TORCH_VERSION:-2.13.0}"
# The Ray, HTA and tb-profiler extras too: the tests run 'dlprof analyze --ray local', load dlprof's traces in HTA
# and check that the PyTorch Profiler tab still reads them.
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[test,ray,hta,tb-profiler]"
