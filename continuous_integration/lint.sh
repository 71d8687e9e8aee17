#!/usr/bin/env bash
# Lint and check the layout of the package, its tests and the benchmarks with ruff.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python -m ruff check distributed benchmarks
python -m ruff format --check distributed benchmarks
