#!/usr/bin/env bash
# Run the test suite, two tests at a time (pytest-xdist); extra arguments are passed to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python -m pytest distributed -n 2 "$@"
