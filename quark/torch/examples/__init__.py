"""Small real workloads used by the examples, benchmarks and tests (no downloads)."""
