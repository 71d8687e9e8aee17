#!/usr/bin/env bash
# Run the quick benchmark set and fail when a ratio to dask's threaded
# scheduler regressed by more than 35 % against benchmarks/baseline.json
# (failing cases are re-run up to twice; a ratio keeps its best run: the
# latency-bound cases move most with other load on the machine).
# Extra arguments go to the gate (e.g. --threshold 0.75).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
timeout 300 python -m benchmarks run --quick --out "$tmp/bench.json"
python -m benchmarks gate --rerun 2 --baseline benchmarks/baseline.json --results "$tmp/bench.json" "$@"
