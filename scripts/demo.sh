#!/usr/bin/env bash
# Set up, record the built-in LoRA fine-tune (offline, ~20 s on 2 CPU cores) into traces/demo-*/, analyze it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PYTHON="${PYTHON:-python3}"
run="demo-$(date +%Y%m%d-%H%M%S)"
"$PYTHON" -m dlprof record --name "$run" "$@"
"$PYTHON" -m dlprof analyze "traces/$run"
"$PYTHON" -m dlprof analyze "traces/$run" -o "traces/$run.html"
echo "dlprof demo: the report with pictures is traces/$run.html"
