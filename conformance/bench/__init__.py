"""Benchmarks of the twin against upstream vLLM 0.32.0: shared builders and the quick pass.

The same scenario builders feed two front ends: the asv suites under ``benchmarks/`` (history
across commits, HTML) and ``vtwin bench --quick`` (one interleaved run, impl / upstream ratios).

This package must stay importable on its own, without vLLM and without the rest of
``conformance``: asv loads it straight from the working tree under a private name while the
project installed in its environment is an older commit, so every import inside it is relative
or targets ``impl``, ``workloads`` and (lazily) ``vllm``.
"""

from __future__ import annotations

SYSTEMS: tuple[str, ...] = ("impl", "upstream")
"""The systems every benchmark is parametrized by; "upstream" is vLLM 0.32.0."""

__all__ = ["SYSTEMS"]
