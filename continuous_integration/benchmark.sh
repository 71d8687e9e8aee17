#!/usr/bin/env bash
# Run the quick benchmark set and fail when a gated time regressed by more than
# 35 % against the code of the baseline's commit, run side by side on this
# machine (each gated case on that commit and then here; failing cases are
# re-run on both sides up to twice, each keeping its best run). A clone without
# that commit compares ratios to dask's threaded scheduler with the ones stored
# in benchmarks/baseline.json instead.
# Extra arguments go to the gate (e.g. --threshold 0.75).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
timeout 900 python -m benchmarks gate --rerun 2 --baseline benchmarks/baseline.json --out "$tmp/bench.json" "$@"
