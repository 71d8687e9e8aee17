#!/usr/bin/env bash
# Run the test suite; extra arguments are passed to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python -m pytest distributed "$@"
