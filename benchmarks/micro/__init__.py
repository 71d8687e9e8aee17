"""Microbenchmarks of this project's internals (pytest-benchmark); skipped elsewhere."""
