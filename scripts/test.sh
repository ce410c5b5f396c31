#!/usr/bin/env bash
# Set up, then run the whole test suite: ~18 minutes on 2 quiet CPU cores (22 under CI's own load) (GPU tests skip without CUDA).
# DLPROF_SKIP_SETUP=1 skips the install, for a caller that has just run scripts/setup.sh (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${DLPROF_SKIP_SETUP:-0}" != 1 ]]; then
  bash scripts/setup.sh
fi
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pytest "$@"
