"""Import time to a first usable scheduler, in a fresh interpreter per sample (asv timeraw).

The code imports the system, builds a scheduler and runs one `schedule()`; the target for the
twin is 1 s. Upstream's number includes importing vLLM (and torch), which a server pays too.
"""

from __future__ import annotations

from .common import SYSTEMS, require, submodule

probes = submodule("probes")


class ImportTime:
    params = [SYSTEMS]
    param_names = ["system"]
    repeat = 3
    rounds = 1  # upstream's sample is a cold `import vllm`: seconds each
    timeout = 600

    def setup(self, system: str) -> None:
        require("impl.sched.scheduler")

    def timeraw_import_first_scheduler(self, system: str) -> str:
        return str(probes.import_code(system))
