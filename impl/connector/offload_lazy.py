"""Lazy offload: the CPU tier copies cached GPU blocks just before the allocator evicts them.

Lazy mode stores nothing for running requests. Each step it walks the GPU free queue in
eviction order from where it stopped last time (`cursor`; from the head again once that block
left the queue) and copies the cached blocks the CPU does not hold yet, keeping `target_free`
blocks ahead of the allocator covered (free, or copied and so safe to evict), at most as many
as the CPU pool has free. `lazy_target_blocks` sizes that headroom per KV-cache layout.
"""

from __future__ import annotations

from collections.abc import Iterator

from impl.connector.offload_state import StoreBatch
from impl.core.block import KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.specs import KVCacheConfig, MambaSpec, SlidingWindowSpec


class LazyStores:
    cpu_block_pool: BlockPool
    _gpu_pool: BlockPool | None
    cursor: KVCacheBlock | None  # the last free block scanned
    target_free: int

    def _lazy_stores(self) -> StoreBatch:
        batch = StoreBatch()
        if self._gpu_pool is None:  # lazy mode's target is at least two blocks
            return batch
        gpu, cpu = self._gpu_pool, self.cpu_block_pool
        num_cpu_free = cpu.get_num_free_blocks()
        if self.cursor is not None and self.cursor.ref_cnt > 0:
            self.cursor = None  # it left the free queue: start again from the head
        last = self.cursor
        for covered, block in enumerate(_free_blocks_after(gpu, self.cursor)):
            if covered >= self.target_free or len(batch.gpu_block_ids) >= num_cpu_free:
                break
            last = block
            if (block.block_hash is not None and not block.is_null
                    and cpu.get_cached_block(block.block_hash, [block.hash_group_id]) is None):
                batch.gpu_block_ids.append(block.block_id)
        self.cursor = last
        if batch.gpu_block_ids:
            batch.cpu_block_ids = [b.block_id for b in
                                   cpu.get_new_blocks(len(batch.gpu_block_ids))]
            gpu.touch([gpu.blocks[i] for i in batch.gpu_block_ids])
        return batch


def lazy_target_blocks(kv_cache_config: KVCacheConfig, max_num_batched_tokens: int) -> int:
    """GPU blocks lazy mode keeps covered (free, or offloaded and so safe to evict) ahead of
    the allocator: one step's worth of blocks per group (a window's worth for sliding
    windows, two states for mamba), doubled as headroom."""
    target = 0
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        if isinstance(spec, MambaSpec):
            target += 2
        elif isinstance(spec, SlidingWindowSpec):
            target += -(-spec.sliding_window // spec.block_size) + 1
        else:
            target += -(-max_num_batched_tokens // spec.block_size)
    return target * 2


def _free_blocks_after(pool: BlockPool, cursor: KVCacheBlock | None) -> Iterator[KVCacheBlock]:
    """Free blocks in eviction order after `cursor` (all of them when None; none when the
    cursor has left the free queue): one link away, not a scan from the head."""
    return pool.free_block_queue.after(cursor)
