"""Shared foundations below `impl`, `workloads` and `conformance` (error types only)."""
