"""Engine end to end: tiny checkpoint, 32 requests x 128 prompt tokens -> 64 output tokens.

The engines are built once per process (loading upstream's takes seconds) and every call
generates for fresh prompts. On CPU the twin uses its torch reference attention; on CUDA its
engine picks the Triton backend by itself.
"""

from __future__ import annotations

import time

from .common import SYSTEMS, memo, require, submodule

e2e = submodule("e2e")


class EndToEnd:
    params = [SYSTEMS]
    param_names = ["system"]
    number = 1
    repeat = (2, 5, 60.0)
    rounds = 1  # each process loads the engine once (seconds for upstream)
    timeout = 900

    def setup(self, system: str) -> None:
        require("impl.engine", "safetensors")
        self.state = memo(("e2e", system), lambda: e2e.EndToEnd(system))

    def time_generate(self, system: str) -> None:
        self.state.run()

    def track_output_tokens_per_second(self, system: str) -> float:
        start = time.perf_counter()
        self.state.run()
        return self.state.work / (time.perf_counter() - start)

    track_output_tokens_per_second.unit = "tokens/s"  # type: ignore[attr-defined]
