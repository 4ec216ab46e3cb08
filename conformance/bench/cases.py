"""The quick pass: the asv suites' measurements at one size each, with the issue's targets.

Sizes are picked so the whole pass takes a few minutes on two shared cores: pools of 100k
blocks (asv adds 10k and 1M), every hash function at every block size, every decode batch
size, one admission and one chunked-prefill shape, both bundled trace subsamples, the memory of
a 1M-block pool and the import time. Names match the asv benchmarks they shadow.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from .measure import Case, Target
from .probes import ImportTime, PoolMemory, measure_import, measure_memory
from .scenarios import (
    POOL_OPS,
    Admission,
    ChunkedPrefill,
    Decode,
    HashPrompt,
    PoolOp,
    Replay,
    same_hashes,
)
from .systems import HASH_ALGOS

QUICK_POOL_BLOCKS = 100_000
HASH_BLOCK_SIZES: tuple[int, ...] = (16, 32, 512)
DECODE_SIZES: tuple[int, ...] = (16, 64, 256, 1024)
REPLAYS: tuple[str, ...] = ("mooncake", "azure")

# Issue 15's targets (ratios in one run, never asserted by a test).
POOL_TARGET = Target("speedup_min", 5.0, ">= 5x throughput")
MEMORY_TARGET = Target("speedup_min", 1.0, "<= upstream's")
HASH_TARGETS = {"sha256_cbor": 4.0, "xxhash_cbor": 4.0, "sha256": 3.0, "xxhash": 3.0}
DECODE_TARGET = Target("speedup_min", 10.0, ">= 10x")
PREFILL_TARGET = Target("speedup_min", 5.0, ">= 5x")
REPLAY_TARGET = Target("speedup_min", 10.0, ">= 10x")


def pool_cases(num_blocks: int = QUICK_POOL_BLOCKS) -> list[Case]:
    cases = []
    for op in POOL_OPS:
        cases.append(Case(f"block_pool.{op}[{num_blocks}]", "Mblocks/s",
                          partial(PoolOp, num_blocks=num_blocks, op=op),
                          lower_is_better=False, scale=1e-6, target=POOL_TARGET))
    cases.append(Case("block_pool.memory[1000000]", "MiB", PoolMemory, scale=1 / 2**20,
                      measure=measure_memory, rounds=1, target=MEMORY_TARGET,
                      note="tracemalloc peak while building the pool; deterministic"))
    return cases


def hash_cases() -> list[Case]:
    cases = []
    for algo in HASH_ALGOS:
        bound = HASH_TARGETS[algo]
        for block_size in HASH_BLOCK_SIZES:
            cases.append(Case(
                f"hashing.{algo}[{block_size}]", "Mtokens/s",
                partial(_checked_hash_prompt, algo=algo, block_size=block_size),
                lower_is_better=False, scale=1e-6, reusable=True,
                target=Target("speedup_min", bound, f">= {bound:g}x"),
                note="8192-token prompt; values checked identical"))
    return cases


_CHECKED: set[tuple[str, int]] = set()


def _checked_hash_prompt(system: str, algo: str, block_size: int) -> HashPrompt:
    """Refuse to time a hash function whose values differ between the systems."""
    if (algo, block_size) not in _CHECKED:
        same_hashes(algo, block_size)
        _CHECKED.add((algo, block_size))
    return HashPrompt(system, algo, block_size)


def scheduler_cases() -> list[Case]:
    cases = []
    for n in DECODE_SIZES:
        cases.append(Case(f"scheduler.decode[{n}]", "ms/step", partial(Decode, n=n),
                          scale=1e3, reusable=True, between=Decode.top_up, target=DECODE_TARGET,
                          note="schedule + update_from_output, stub runner excluded"))
    cases.append(Case("scheduler.admission[64x2048+64]", "ms/step", Admission, scale=1e3,
                      target=PREFILL_TARGET,
                      note="one step admitting 64 prefix hits of 128 blocks each"))
    cases.append(Case("scheduler.chunked_prefill[4x8192/512]", "ms/step", ChunkedPrefill,
                      scale=1e3, target=PREFILL_TARGET, note="64 steps of 512-token chunks"))
    return cases


def replay_cases() -> list[Case]:
    cases = []
    for name in REPLAYS:
        cases.append(Case(f"replay.{name}", "steps/s", partial(_replay, name=name),
                          lower_is_better=False, rounds=3, target=REPLAY_TARGET,
                          note="bundled subsample to completion; step counts checked equal"))
    return cases


_WORKLOADS: dict[str, Any] = {}
_REPLAY_COUNTS: dict[str, tuple[int, int]] = {}


def _replay(system: str, name: str) -> Replay:
    if name not in _WORKLOADS:
        import workloads

        _WORKLOADS[name] = workloads.load(name)
    return _CheckedReplay(system, _WORKLOADS[name])


class _CheckedReplay(Replay):
    """A replay that fails unless both systems take the same steps and schedule the same tokens
    (a cheap check that the timings compare equal work)."""

    def __init__(self, system: str, workload: Any) -> None:
        super().__init__(system, workload)
        self.name = workload.name

    def run(self) -> tuple[int, int]:
        counts = super().run()
        expected = _REPLAY_COUNTS.setdefault(self.name, counts)
        if counts != expected:
            raise AssertionError(f"replay {self.name}: {self.loop.system} took (steps, tokens) "
                                 f"{counts}, the other system {expected}")
        return counts


def import_cases() -> list[Case]:
    return [Case("import.first_scheduler", "s", ImportTime, measure=measure_import, rounds=3,
                 target=Target("impl_max", 1.0, "impl <= 1 s"),
                 note="fresh interpreter: imports + build + one schedule()")]


def quick_cases() -> list[Case]:
    return [*scheduler_cases(), *pool_cases(), *hash_cases(), *replay_cases(),
            *import_cases()]
