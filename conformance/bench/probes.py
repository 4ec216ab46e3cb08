"""Self-timed measurements: import time in a fresh interpreter, and the memory of a pool.

Import time only means something in a process that has imported nothing yet, so it runs in a
child interpreter that loads `systems.py` by path (it has no relative imports for this reason)
and reports its own clock: interpreter start-up is excluded, everything from the first import
to a scheduler that has completed one `schedule()` call is included.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

from .systems import block_pool, check_system

SYSTEMS_PY = Path(__file__).resolve().with_name("systems.py")


def import_code(system: str, systems_py: Path = SYSTEMS_PY) -> str:
    """Python source that imports `system` and builds a scheduler ready to use."""
    check_system(system)
    return (
        "import importlib.util, sys\n"
        "_spec = importlib.util.spec_from_file_location(\n"
        f"    '_vtwin_bench_systems', {str(systems_py)!r})\n"
        "_mod = sys.modules['_vtwin_bench_systems'] = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_mod)\n"
        f"_mod.scheduler({system!r}, _mod.SchedSpec(num_blocks=1025, max_num_seqs=16,\n"
        "    max_num_batched_tokens=2048, max_model_len=2048)).schedule()\n"
    )


class ImportTime:
    """Seconds from the first import to a usable scheduler, in a fresh interpreter."""

    work = 1

    def __init__(self, system: str) -> None:
        self.code = ("import time\n_start = time.perf_counter()\n" + import_code(system)
                     + "print(repr(time.perf_counter() - _start))\n")

    def run(self) -> float:
        with tempfile.TemporaryDirectory(prefix="vtwin-bench-import-") as cwd:
            done = subprocess.run([sys.executable, "-c", self.code], cwd=cwd, check=False,
                                  capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"import probe exited with {done.returncode}: {last}")
        return float(done.stdout.strip().splitlines()[-1])


def measure_import(state: ImportTime, number: int) -> float:
    return state.run()


class PoolMemory:
    """Bytes Python allocates to build an `n`-block pool (tracemalloc peak, so exact)."""

    work = 1

    def __init__(self, system: str, num_blocks: int = 1_000_000) -> None:
        self.system, self.num_blocks = system, num_blocks
        block_pool(system, 2)  # import the module first: its own allocations are not the pool's

    def run(self) -> float:
        tracemalloc.start()
        try:
            pool = block_pool(self.system, self.num_blocks)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        del pool
        return float(peak)


def measure_memory(state: PoolMemory, number: int) -> float:
    return state.run()
