"""Offload-heavy sessions (issue 11): a working set several times the GPU pool, so a session's
prefix is evicted from the GPU between its turns and comes back from the CPU tier.

Twelve conversations (times the scale) share two system prompts and return after long gaps
(other sessions' turns fill the GPU meanwhile). The GPU pool holds about a quarter of what the
sessions cache; the CPU pool (SimpleCPUOffloadConnector) is four times the GPU's, so what the
GPU evicts is still there when the turn comes back. `offload-sessions` stores eagerly (every
confirmed block); `offload-sessions-lazy` stores only what the GPU is about to evict.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, rng_for, scaled, seg
from workloads.generators.sessions import SessionShape, _session
from workloads.model import EngineConfig, KVConnectorConfig, Workload

EAGER_FAMILY = "offload-sessions"
EAGER_SUMMARY = ("sessions whose prefixes leave the GPU between turns and come back from the "
                 "CPU tier (eager offload)")
LAZY_FAMILY = "offload-sessions-lazy"
LAZY_SUMMARY = "the same sessions with lazy offload (blocks copied only as they near eviction)"
NUM_GPU_BLOCKS = 97


def _sessions(family: str, summary: str, lazy: bool, seed: int, scale: float,
              name: str) -> Workload:
    rng = rng_for(family, seed)
    config = EngineConfig(
        block_size=16, num_blocks=NUM_GPU_BLOCKS, max_num_seqs=6, max_num_batched_tokens=256,
        max_model_len=1024,
        kv_connector=KVConnectorConfig(num_cpu_blocks=4 * NUM_GPU_BLOCKS, lazy_offload=lazy,
                                       load_latency_steps=2, store_latency_steps=1),
    )
    builder = WorkloadBuilder(name, f"{family} (seed {seed}, scale {scale:g}): {summary}",
                              config, seed)
    systems = [seg(f"system-{i}", rng.randint(96, 160)) for i in range(2)]
    shape = SessionShape(turns=(3, 5), message=(16, 80), output=(8, 32), gap=(20, 60),
                         final_output=(8, 32))
    for index in range(scaled(12, scale)):
        _session(builder, rng, f"sess{index:03d}", rng.randint(0, 40), [rng.choice(systems)],
                 shape)
    return builder.build()


def eager(seed: int, scale: float, name: str) -> Workload:
    return _sessions(EAGER_FAMILY, EAGER_SUMMARY, False, seed, scale, name)


def lazy(seed: int, scale: float, name: str) -> Workload:
    return _sessions(LAZY_FAMILY, LAZY_SUMMARY, True, seed, scale, name)
