"""Block pool: allocate, free, touch and evict over pools of 10k / 100k / 1M blocks.

Each timed call applies one operation to every block of the pool, 16 blocks per call (one
request's worth), so the time divides into a per-block cost. A call consumes its state (the pool
ends up drained, or freed), hence `number = 1`: asv rebuilds the pool in `setup` before each
call, and no warm-up call may run on a pool that setup did not rebuild.
"""

from __future__ import annotations

import tracemalloc

from .common import SYSTEMS, require, submodule

scenarios = submodule("scenarios")
systems = submodule("systems")

POOL_SIZES = [10_000, 100_000, 1_000_000]


class _PoolOp:
    op = ""
    params = [SYSTEMS, POOL_SIZES]
    param_names = ["system", "num_blocks"]
    number = 1
    warmup_time = 0.0
    repeat = (2, 5, 30.0)
    rounds = 1  # setup (a fresh pool of up to 1M blocks) dominates; one process per case
    timeout = 600

    def setup(self, system: str, num_blocks: int) -> None:
        require("impl.core.block_pool")
        self.state = scenarios.PoolOp(system, num_blocks + 1, self.op)  # + the null block


class GetNewBlocks(_PoolOp):
    op = "get_new_blocks"

    def time_get_new_blocks(self, system: str, num_blocks: int) -> None:
        self.state.run()


class FreeBlocks(_PoolOp):
    op = "free_blocks"

    def time_free_blocks(self, system: str, num_blocks: int) -> None:
        self.state.run()


class Touch(_PoolOp):
    op = "touch"

    def time_touch(self, system: str, num_blocks: int) -> None:
        self.state.run()


class EvictCached(_PoolOp):
    op = "evict"

    def time_evict_cached(self, system: str, num_blocks: int) -> None:
        self.state.run()


class PoolMemory:
    """Memory of a 1M-block pool. Both systems' pool modules (and so torch, which vLLM's pulls
    in) are imported in setup, so the process baselines match and peakmem differences are the
    pools'. `track_pool_mib` is the exact allocation (tracemalloc), free of RSS noise."""

    params = [SYSTEMS]
    param_names = ["system"]
    num_blocks = 1_000_001
    timeout = 600

    def setup(self, system: str) -> None:
        require("impl.core.block_pool")
        systems.block_pool("impl", 2)
        systems.block_pool("upstream", 2)

    def peakmem_pool_1m(self, system: str) -> None:
        self.pool = systems.block_pool(system, self.num_blocks)

    def track_pool_mib(self, system: str) -> float:
        tracemalloc.start()
        try:
            pool = systems.block_pool(system, self.num_blocks)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        del pool
        return peak / 2**20

    track_pool_mib.unit = "MiB"  # type: ignore[attr-defined]
