"""vtwin's twin of vLLM V1: KV-cache core, scheduler and model runner.

Our own code, written from vLLM's documented and observed behaviour. It never imports vllm.
"""

from impl.compiled import activate

activate()  # VTWIN_COMPILED=1: load impl/core and impl/sched from the mypyc build (impl.compiled)
