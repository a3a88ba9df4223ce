"""Benchmarks: figures, not pass/fail tests (see bench/README.md)."""
