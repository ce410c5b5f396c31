#!/usr/bin/env bash
# Set up, then run the whole test suite (~3 minutes on 2 CPU cores; GPU tests skip without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pytest "$@"
