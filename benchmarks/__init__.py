"""Benchmarks for Gigastep; run each as ``python -m benchmarks.<name> --help``."""
