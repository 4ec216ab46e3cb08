"""Out-of-process systems: a worker process (`python -m conformance.systems.remote`) that builds
systems in its own interpreter (a managed environment's, for another vLLM release) and answers the
harness over stdin/stdout (`protocol`). The harness side is `conformance.systems.remote.proxy`."""
