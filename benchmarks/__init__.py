"""asv suites: the twin (impl) against upstream vLLM 0.32.0, every benchmark parametrized by
system. Run them with `nox -s asv`; `vtwin bench --quick` is the one-process quick pass."""
