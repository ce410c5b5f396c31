#!/usr/bin/env bash
# The "popular claim" experiment of docs/validation.md: "tokenizing a batch takes 50-100 ms, so 4 workers make it 1.75x faster".
#
#   bash scripts/claim_check.sh [OUT_DIR] [extra dlprof sweep options...]
#
# Sweeps num_workers 0,1,2,4 on the built-in workload (tiny Qwen2 + LoRA, tokenizing in __getitem__) with
# batch 1 and up to 2048 tokens per example, twice:
#   1. as shipped: the fast (Rust) tokenizer, ~0.1-0.2 ms per sample;
#   2. with a slow tokenizer: --tokenizer-cost-ms 60 adds 60 ms of CPU time to tokenizing each sample
#      (= each batch at batch 1), spent inside the tokenizer calls: the regime the claim describes.
# Each sweep measures every count for real, in one launch whose in-process trials train at each count in turn
# (dlprof sweep's default; pass --launches for one launch per count), and checks dlprof's advice against it. The
# Markdown reports are OUT_DIR/fast-tokenizer.md and OUT_DIR/slow-tokenizer.md, the traces OUT_DIR/traces/<sweep>/
# (with --launches, OUT_DIR/traces/<sweep>/<count>/).
set -euo pipefail
PYTHON="${PYTHON:-python3}"
SLOW_TOKENIZER_MS="${SLOW_TOKENIZER_MS:-60}"
out="${1:-claim-check-$(date +%Y%m%d-%H%M%S)}"
shift || true
mkdir -p "$out"
out="$(cd "$out" && pwd)"  # relative to where it was started, not to the repository
cd "$(dirname "$0")/.."
sweep=(-m dlprof sweep --workers 0,1,2,4 --batch-size 1 --max-length 2048 --out "$out/traces")

echo "claim check 1/2: the shipped tokenizer" >&2
"$PYTHON" "${sweep[@]}" --name fast-tokenizer -o "$out/fast-tokenizer.md" "$@"
echo "claim check 2/2: a slow tokenizer (+${SLOW_TOKENIZER_MS} ms of CPU per sample)" >&2
"$PYTHON" "${sweep[@]}" --name slow-tokenizer --tokenizer-cost-ms "$SLOW_TOKENIZER_MS" -o "$out/slow-tokenizer.md" "$@"

echo "claim check: reports in $out/fast-tokenizer.md and $out/slow-tokenizer.md" >&2
