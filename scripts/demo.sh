#!/usr/bin/env bash
# Set up, then record the built-in LoRA fine-tune (offline, ~15 s on 2 CPU cores) into traces/demo-*/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m dlprof record --name "demo-$(date +%Y%m%d-%H%M%S)" "$@"
