#!/usr/bin/env bash
# Run the quick benchmark set and fail when a ratio to dask's threaded
# scheduler regressed by more than 50 % against benchmarks/baseline.json
# (failing cases are re-run once; a ratio keeps the better of its two runs).
# Extra arguments go to the gate (e.g. --threshold 0.75).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
timeout 300 python -m benchmarks run --quick --out "$tmp/bench.json"
python -m benchmarks gate --rerun --baseline benchmarks/baseline.json --results "$tmp/bench.json" "$@"
