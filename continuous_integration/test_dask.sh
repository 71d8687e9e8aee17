#!/usr/bin/env bash
# Run dask's own tests of its distributed integration (dask/tests/test_distributed.py and
# dask/dataframe/dask_expr/tests/test_distributed.py, shipped with the installed dask)
# against this package.  The tests listed in
# continuous_integration/dask_tests_skipped.txt are skipped with their reason
# (see continuous_integration/dask_tests_plugin.py); every other test must pass.
# Extra arguments go to pytest (e.g. -x, -k NAME).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
dask_dir=$(python -c "import dask, os; print(os.path.dirname(dask.__file__))")
# This checkout's package, and the plugin that applies the list.
export PYTHONPATH="$repo:$repo/continuous_integration${PYTHONPATH:+:$PYTHONPATH}"
# --confcutdir: dask's conftest.py (its fixtures and marks) is outside this checkout.
# Its suite uses marks of plugins not installed here (flaky, slow): not an error.
timeout 600 python -m pytest "$dask_dir/tests/test_distributed.py" \
    "$dask_dir/dataframe/dask_expr/tests/test_distributed.py" \
    --confcutdir "$dask_dir" -p dask_tests_plugin \
    --skip-list "$repo/continuous_integration/dask_tests_skipped.txt" \
    -W ignore::pytest.PytestUnknownMarkWarning \
    -p no:cacheprovider --timeout 60 -q -rsxX --durations=10 "$@"
