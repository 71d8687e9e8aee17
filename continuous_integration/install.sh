#!/usr/bin/env bash
# Install the package in editable mode with its test dependencies.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python -m pip install -e ".[test]"
