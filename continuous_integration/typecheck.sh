#!/usr/bin/env bash
# Type-check the package and the benchmarks with mypy in strict mode.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python -m mypy --strict distributed
python -m mypy --strict benchmarks
