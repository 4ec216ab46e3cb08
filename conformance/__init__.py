"""vtwin's harness: drives the twin (`impl`) and upstream vLLM side by side and compares them.

Upstream vLLM is imported only here (and in benchmarks/), lazily, so that the twin and its unit
tests never need it installed.
"""
