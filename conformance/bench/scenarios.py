"""The measured scenarios. Each builds its state in `__init__` (untimed) and exposes `run()`,
the one call a benchmark times; `work` is how many units (blocks, tokens, steps) one run does.

States that a run consumes (a drained pool, admitted requests) are rebuilt per run: asv re-runs
`setup` before every timed call, and the quick pass builds a new state per round. The decode
state is the exception: stepping it keeps it in the same steady state, so it is built once and
only topped up between runs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from .loop import EngineLoop
from .systems import SchedSpec, bare_request, block_pool, request_hasher

VOCAB = 32000
POOL_BATCH = 16
"""Blocks per pool call: one 256-token request's worth at block size 16."""


def tokens(seed: int, length: int) -> list[int]:
    """Deterministic token ids above the special ids (0..2)."""
    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(length)]


# -- block pool ----------------------------------------------------------------------------
POOL_OPS: tuple[str, ...] = ("get_new_blocks", "free_blocks", "touch", "evict")


class PoolOp:
    """One pool operation applied to every usable block of an `n`-block pool, `POOL_BATCH`
    blocks per call (the granularity the scheduler uses).

    get_new_blocks: allocate from a pool of empty free blocks. free_blocks: release allocated,
    hashed blocks, tail first, as each system's scheduler frees a finished request (upstream
    passes `reversed(table)`; the twin reverses the table it owns in place and passes the
    list, the reversal timed with the free). touch: take references on cached
    free blocks (prefix hits pull them out of the middle of the free queue). evict: allocate
    from a pool whose free blocks are all cached, so every allocation drops a cache entry.
    """

    def __init__(self, system: str, num_blocks: int, op: str) -> None:
        if op not in POOL_OPS:
            raise ValueError(f"unknown pool op {op!r} (known: {', '.join(POOL_OPS)})")
        self.system, self.op = system, op
        self.pool = block_pool(system, num_blocks)
        usable = num_blocks - 1
        self.work = usable - usable % POOL_BATCH
        self.batches: list[list[Any]] = []
        if op == "get_new_blocks":
            return
        self.batches = [self.pool.get_new_blocks(POOL_BATCH)
                        for _ in range(self.work // POOL_BATCH)]
        for index, batch in enumerate(self.batches):
            self._cache(batch, index)
        if op in ("touch", "evict"):
            for batch in self.batches:
                self.pool.free_blocks(reversed(batch))
        if op == "touch":
            random.Random(0).shuffle(self.batches)  # hits land all over the free queue

    def _cache(self, batch: list[Any], index: int) -> None:
        hashes = [index.to_bytes(8, "little") + i.to_bytes(8, "little") + bytes(16)
                  for i in range(len(batch))]
        if self.system == "impl":
            self.pool.cache_full_blocks(batch, hashes, 0, len(batch), 0, block_size=16)
        else:  # upstream reads the hashes off the request; events are off, so nothing else
            self.pool.cache_full_blocks(SimpleNamespace(block_hashes=hashes), batch, 0,
                                        len(batch), 16, 0)

    def run(self) -> None:
        pool = self.pool
        if self.op in ("get_new_blocks", "evict"):
            get = pool.get_new_blocks
            for _ in range(self.work // POOL_BATCH):
                get(POOL_BATCH)
        elif self.op == "free_blocks":
            free = pool.free_blocks
            if self.system == "impl":
                for batch in self.batches:
                    batch.reverse()
                    free(batch)
            else:
                for batch in self.batches:
                    free(reversed(batch))
        else:
            touch = pool.touch
            for batch in self.batches:
                touch(batch)


# -- hashing -------------------------------------------------------------------------------
class HashPrompt:
    """Hash every block of one `num_tokens`-token prompt (what building a request does)."""

    def __init__(self, system: str, algo: str, block_size: int, num_tokens: int = 8192) -> None:
        self.hasher = request_hasher(system, algo, block_size)
        self.request = bare_request(system, "hash", tokens(1, num_tokens))
        self.work = num_tokens

    def run(self) -> list[bytes]:
        return self.hasher(self.request)


def same_hashes(algo: str, block_size: int, num_tokens: int = 8192) -> int:
    """Hash one prompt with both systems; raise unless the values are identical."""
    impl = HashPrompt("impl", algo, block_size, num_tokens).run()
    upstream = [bytes(h) for h in HashPrompt("upstream", algo, block_size, num_tokens).run()]
    if impl != upstream:
        first = next(i for i, (a, b) in enumerate(zip(impl, upstream, strict=False)) if a != b)
        raise AssertionError(f"{algo}/{block_size}: block hashes differ from block {first}")
    return len(impl)


# -- scheduler -----------------------------------------------------------------------------
class Decode:
    """`n` requests each decoding one token per step: the steady state of a busy server.

    Prompts of 16..31 tokens stagger block boundaries, so about n/16 requests take a new block
    each step instead of all at once every 16th. Staggered `max_tokens` spreads finishes too;
    `top_up` replaces finished requests outside the timed region.
    """

    MAX_TOKENS = 1024

    def __init__(self, system: str, n: int) -> None:
        self.n = n
        spec = SchedSpec(num_blocks=n * 72 + 1, max_num_seqs=n,
                         max_num_batched_tokens=max(2048, 2 * n), max_model_len=2048)
        self.loop = EngineLoop(system, spec)
        self.work = 1
        self._next_id = 0
        self.top_up()

    def top_up(self) -> None:
        """Refill to `n` running requests and step until every one of them is decoding."""
        loop = self.loop
        added = False
        while loop.num_running + loop.num_waiting < self.n:
            i = self._next_id
            self._next_id += 1
            max_tokens = self.MAX_TOKENS // 2 + (i * 37) % (self.MAX_TOKENS // 2)
            loop.add(loop.make_request(f"d{i}", tokens(i, 16 + i % 16), max_tokens))
            added = True
        while added and (loop.num_waiting or any(
                r.num_computed_tokens < r.num_tokens - 1 for r in loop.scheduler.running)):
            loop.step()

    def run(self) -> None:
        self.loop.step()


class Admission:
    """A warm prefix cache and `n` waiting requests that share it: one step admits them all.

    The shared `prefix` was computed (and cached) by an earlier request; each arrival adds a
    `suffix` of its own. The step looks up every prefix block, touches the hits and allocates
    the suffix, which is the admission path of a chat or agent server.
    """

    def __init__(self, system: str, n: int = 64, prefix: int = 2048, suffix: int = 64) -> None:
        blocks = (prefix + suffix) // 16 + 1 + n * (suffix // 16 + 2)
        spec = SchedSpec(num_blocks=blocks + 64, max_num_seqs=n,
                         max_num_batched_tokens=n * suffix + 256, max_model_len=8192)
        self.loop = EngineLoop(system, spec)
        shared = tokens(0, prefix)
        self.loop.add(self.loop.make_request("warm", shared + tokens(-1, suffix), 1))
        self.loop.run_until_idle()
        self.pending = [self.loop.make_request(f"a{i}", shared + tokens(i, suffix), 16)
                        for i in range(n)]
        self.work = 1

    def run(self) -> None:
        for request in self.pending:
            self.loop.add(request)
        self.loop.step()


class ChunkedPrefill:
    """`n` long prompts prefilled in `budget`-token chunks until each has its first token.

    `max_tokens` is 1, so a request finishes as its prefill completes and no decode step takes
    budget from the prefills still running: the run is exactly ceil(n * prompt / budget) steps.
    """

    def __init__(self, system: str, n: int = 4, prompt: int = 8192, budget: int = 512) -> None:
        spec = SchedSpec(num_blocks=n * (prompt // 16 + 2) + 16, max_num_seqs=n,
                         max_num_batched_tokens=budget, max_model_len=prompt + 64)
        self.loop = EngineLoop(system, spec)
        self.pending = [self.loop.make_request(f"c{i}", tokens(100 + i, prompt), 1)
                        for i in range(n)]
        self.work = -(-n * prompt // budget)

    def run(self) -> None:
        for request in self.pending:
            self.loop.add(request)
        self.work = self.loop.run_until_idle()


# -- workload replay -------------------------------------------------------------------------
class Replay:
    """A bundled workload replayed to completion: arrivals at their step, a stub model.

    Requests are built (and their prompts hashed) before the clock starts: prompt hashing is
    measured on its own, and would otherwise dominate a trace of long prompts.
    """

    def __init__(self, system: str, workload: Any) -> None:
        config = workload.config
        if config.num_spec_tokens or config.async_scheduling or len(config.kv_cache_groups) != 1:
            raise ValueError(f"{workload.name}: replay supports plain single-group workloads")
        self.loop = EngineLoop(system, SchedSpec.from_engine_config(config))
        self.arrivals: list[tuple[int, Any]] = [
            (r.arrival_step, self.loop.make_request(r.request_id, r.prompt_token_ids,
                                                    r.max_tokens, float(r.arrival_step)))
            for r in workload.requests]
        self.work = 0

    def run(self) -> tuple[int, int]:
        """Replay to the end; returns (steps, scheduled tokens), equal for equal systems."""
        loop, arrivals = self.loop, self.arrivals
        index, step = 0, 0
        while index < len(arrivals) or loop.has_requests():
            while index < len(arrivals) and arrivals[index][0] <= step:
                loop.add(arrivals[index][1])
                index += 1
            if loop.has_requests():
                loop.step()
            step += 1
        self.work = loop.steps
        return loop.steps, loop.scheduled_tokens


def replay_steps(workload: Any, systems: Sequence[str] = ("impl",)) -> int:
    """How many engine steps the replay takes (the `work` of a replay run)."""
    return Replay(systems[0], workload).run()[0]
