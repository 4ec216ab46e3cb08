"""Tests of the workloads package: format, generators, traces and CLI."""
