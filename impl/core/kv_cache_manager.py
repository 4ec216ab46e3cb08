"""`KVCacheManager`: the scheduler's only door into the KV cache.

Per request it answers "which blocks are already computed (prefix hits)?" and "give me slots for
N more tokens, or tell me there is no room" (then the scheduler preempts). Block layout of one
`allocate_slots` call:

    | computed | new prefix hits | external hits | new tokens | lookahead |
                                 |<------------ to be allocated ---------->|
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.core.block import KVCacheBlock
from impl.core.coordinator import get_kv_cache_coordinator
from impl.core.events import KVCacheEvent
from impl.core.full_attention import FullAttentionManager
from impl.core.kv_cache_blocks import KVCacheBlocks
from impl.core.lagging_hits import lagging_hit
from impl.core.mamba_align import MambaAlignManager
from impl.core.mamba_boundaries import BoundaryState
from impl.core.partial_hits import truncate_hit
from impl.core.prefix_stats import PrefixCacheStats
from impl.core.specs import KVCacheConfig
from vtwin.errors import ReleaseCheckFailed

if TYPE_CHECKING:
    from impl.sched.request import Request


class KVCacheManager:
    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
        hash_block_size: int | None = None,
        *,
        enable_caching: bool,
        log_stats: bool,
        enable_kv_cache_events: bool,
        max_in_flight_tokens: int | None = None,
        use_eagle: bool = False,
        num_reprefillable_tokens: int = 0,
    ) -> None:
        """`num_reprefillable_tokens`: computed tokens a chain of MTP modules may prefill
        again, so not indexed yet. `max_in_flight_tokens`: tokens
        scheduled but not yet processed at most (one batch's budget, two under async
        scheduling); sizes the admission cap of block-recycling groups. None:
        `max_model_len`, which makes the cap the whole sequence. Under DCP,
        `kv_cache_config` is the scheduler's view (`impl.core.context_parallel`)."""
        if max_model_len < 1:
            raise ValueError(f"max_model_len: must be >= 1 (got {max_model_len})")
        if not kv_cache_config.kv_cache_groups:
            raise ValueError("kv_cache_config: needs at least one KV cache group (models "
                             "without attention or state are not modelled)")
        if hash_block_size is None:
            hash_block_size = min(kv_cache_config.block_sizes)
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.log_stats = log_stats
        self.coordinator = get_kv_cache_coordinator(
            kv_cache_config, enable_caching, hash_block_size, enable_kv_cache_events, use_eagle)
        self.coordinator.num_reprefillable_tokens = num_reprefillable_tokens
        in_flight = max_model_len if max_in_flight_tokens is None else max_in_flight_tokens
        for manager in self.coordinator.managers:
            cap = getattr(manager.kv_cache_spec, "admission_cap_blocks", None)
            if cap is not None:
                manager.admission_cap_blocks = cap(in_flight, max_model_len)
        self.num_kv_cache_groups = len(kv_cache_config.kv_cache_groups)
        self.block_pool = self.coordinator.block_pool
        self.prefix_cache_stats: PrefixCacheStats | None = PrefixCacheStats() if log_stats else None
        self._empty = KVCacheBlocks(tuple([] for _ in range(self.num_kv_cache_groups)))
        # The common case gets a short path: one full-attention group (no blocks ever skipped,
        # hashes at the block size). See `_allocate_running_full`.
        only = self.coordinator.managers[0] if self.num_kv_cache_groups == 1 else None
        # Exactly full attention: a reference window (a subclass) does skip blocks.
        self._single_full = (only if type(only) is FullAttentionManager
                             and not self.coordinator.num_reprefillable_tokens else None)

    @property
    def usage(self) -> float:
        return self.block_pool.get_usage()

    def make_prefix_cache_stats(self) -> PrefixCacheStats | None:
        if not self.log_stats:
            return None
        stats, self.prefix_cache_stats = self.prefix_cache_stats, PrefixCacheStats()
        return stats

    def empty_blocks(self) -> KVCacheBlocks:
        return KVCacheBlocks(tuple([] for _ in range(self.num_kv_cache_groups)))

    def truncate_hit(self, hits: KVCacheBlocks, num_tokens: int) -> KVCacheBlocks:
        """`hits` cut back to `num_tokens`, a whole block (`partial_hits.truncate_hit`)."""
        return KVCacheBlocks(truncate_hit(hits.blocks, num_tokens, self.coordinator.managers))

    def get_computed_blocks(self, request: Request) -> tuple[KVCacheBlocks, int]:
        """Prefix-cache hits for a new request, and how many tokens they cover.

        At most num_tokens - 1 tokens can hit: the last token must be computed to get logits.
        Each lookup also sets the request's `shared_prefix_boundary` (the coordinator's
        junction; 0 without one), where mamba 'align' ends a chunk to cache a state.
        """
        if not self.enable_caching or request.skip_reading_prefix_cache:
            request.shared_prefix_boundary = 0
            return self.empty_blocks(), 0
        hits, num_hit_tokens, junction = self.coordinator.find_cache_hit_and_junction(
            request, request.num_tokens - 1
        )
        if (num_hit_tokens > 0 and request.report_reused_blocks
                and self.block_pool.enable_kv_cache_events):
            # A gateway following the events learns which blocks this request reuses: on
            # every lookup that hits, whether or not the request is then admitted.
            self.coordinator.emit_reused_block_events(request, hits)
        request.shared_prefix_boundary = junction
        return KVCacheBlocks(hits), num_hit_tokens

    def get_computed_blocks_for_connector(self, request: Request
                                          ) -> tuple[KVCacheBlocks, int, bool]:
        """The local hit a P/D connector completes, and whether a group lags behind it
        (`impl.core.lagging_hits`; this lookup finds no junction); else the agreed hit."""
        if not self.enable_caching or request.skip_reading_prefix_cache:
            return *self.get_computed_blocks(request), False
        found = lagging_hit(self.coordinator, request)
        if found is None:
            return *self.get_computed_blocks(request), False
        request.shared_prefix_boundary = 0
        hits, num_hit, diverged = found
        return KVCacheBlocks(hits), num_hit, diverged

    def record_prefix_cache_stats(self, request: Request, num_hits: int) -> None:
        """Count one lookup (the scheduler calls this once per admission attempt)."""
        if (self.prefix_cache_stats is not None and self.enable_caching
                and not request.skip_reading_prefix_cache):
            self.prefix_cache_stats.record(request.num_tokens, num_hits,
                                           request.num_preemptions > 0)

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: KVCacheBlocks | None = None,
        num_lookahead_tokens: int = 0,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        full_sequence_must_fit: bool = False,
        reserved_blocks: int = 0,
        num_encoder_tokens: int = 0,
    ) -> KVCacheBlocks | None:
        """Slots for `num_new_tokens` (+ lookahead) more tokens; None if the pool is too small.

        On None nothing changed, so the caller can preempt and retry. `reserved_blocks` stay
        out of reach (an asynchronous load must leave in-flight prefills what they still need).
        Tokens a connector supplies (`num_external_computed_tokens`) get fresh blocks once
        every group took its local hits; `delay_cache_blocks` leaves them unhashed until
        they have arrived. `num_encoder_tokens`: the encoder outputs this step writes (an
        encoder-decoder model's cross-attention groups are sized by them).
        """
        single = self._single_full
        if (single is not None and new_computed_blocks is None
                and num_external_computed_tokens == 0 and not full_sequence_must_fit):
            blocks = single.req_to_blocks.get(request.request_id)
            if blocks is not None and request.request_id in single.num_cached_block:
                return self._allocate_running_full(single, blocks, request, num_new_tokens,
                                                   num_lookahead_tokens, delay_cache_blocks)
        coordinator = self.coordinator
        computed = (new_computed_blocks.blocks if new_computed_blocks is not None
                    else self._empty.blocks)
        num_local_computed = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(num_local_computed + num_external_computed_tokens,
                             self.max_model_len)
        num_tokens_main = total_computed + num_new_tokens
        num_tokens_need_slot = min(num_tokens_main + num_lookahead_tokens, self.max_model_len)

        if full_sequence_must_fit:
            # The admission gate counts the pool as it stands: blocks the request still holds
            # outside its window are not given back first, so a waiting session that
            # continues must fit beside them.
            num_full = coordinator.get_num_blocks_to_allocate(
                request.request_id, min(request.num_tokens, self.max_model_len), computed,
                total_computed, apply_admission_cap=True, num_encoder_tokens=num_encoder_tokens,
            )
            if num_full > self.block_pool.get_num_free_blocks():
                return None
        # Free what the request no longer needs before counting what it must get; tokens of an
        # in-flight step (async scheduling) do not count as processed yet.
        coordinator.remove_skipped_blocks(
            request.request_id, max(0, total_computed - request.num_inflight_tokens),
            request.num_prompt_tokens)
        num_to_allocate = coordinator.get_num_blocks_to_allocate(
            request.request_id, num_tokens_need_slot, computed, total_computed,
            num_tokens_main=num_tokens_main, num_encoder_tokens=num_encoder_tokens,
        )
        if num_to_allocate > self.block_pool.get_num_free_blocks() - reserved_blocks:
            return None
        if any(computed) or request.request_id not in coordinator.managers[0].num_cached_block:
            coordinator.add_computed_blocks(request.request_id, computed, total_computed)
            if num_external_computed_tokens > 0:
                coordinator.allocate_external_computed_blocks(
                    request.request_id, num_local_computed, num_external_computed_tokens)
        try:
            new_blocks = coordinator.allocate_new_blocks(request.request_id, num_tokens_need_slot,
                                                         num_tokens_main, num_encoder_tokens)
        except ValueError as err:
            if num_external_computed_tokens and num_new_tokens:
                raise ReleaseCheckFailed("sync-load-blocks-undercounted", (
                    f"{request.request_id}'s sync load of {num_external_computed_tokens} tokens, "
                    f"{num_new_tokens} more scheduled in the same allocation, overdraws the pool "
                    f"({err}): a mamba 'align' group counts one state block per call and this "
                    "call takes two, the hit's and the new one's")) from err
            raise

        if self.enable_caching and not delay_cache_blocks:
            coordinator.cache_blocks(request, min(num_tokens_main, request.num_tokens))
        return KVCacheBlocks(new_blocks)

    def _allocate_running_full(
        self, manager: FullAttentionManager, blocks: list[KVCacheBlock], request: Request,
        num_new_tokens: int, num_lookahead_tokens: int, delay_cache_blocks: bool,
    ) -> KVCacheBlocks | None:
        """`allocate_slots` for a running request of a single full-attention group.

        The same computation as the general path with everything that cannot apply removed:
        no blocks are skipped, there are no new prefix hits, hashes are at the block size.
        """
        max_model_len = self.max_model_len
        total_computed = min(request.num_computed_tokens, max_model_len)
        num_tokens_main = total_computed + num_new_tokens
        need = min(num_tokens_main + num_lookahead_tokens, max_model_len)
        block_size = manager.block_size
        num_new_blocks = -(-need // block_size) - len(blocks)
        if num_new_blocks > 0:
            pool = self.block_pool
            if num_new_blocks > pool.free_block_queue.num_free_blocks:
                return None
            new_blocks = pool.get_new_blocks(num_new_blocks)
            blocks.extend(new_blocks)
            result = KVCacheBlocks((new_blocks,))
        else:
            result = self._empty
        if self.enable_caching and not delay_cache_blocks:
            num_full = min(num_tokens_main, request.num_tokens) // block_size
            if num_full > manager.num_cached_block[request.request_id]:
                manager.cache_blocks(request, request.block_hashes, num_full * block_size)
        return result

    def free(self, request: Request) -> None:
        self.coordinator.free(request.request_id)

    def pop_blocks_for_free(self, request: Request) -> list[KVCacheBlock]:
        return self.coordinator.pop_blocks_for_free(request.request_id)

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int,
                              num_prompt_tokens: int) -> None:
        self.coordinator.remove_skipped_blocks(request_id, num_computed_tokens,
                                               num_prompt_tokens)

    def reset_prefix_cache(self) -> bool:
        if not self.block_pool.reset_prefix_cache():
            return False
        if self.prefix_cache_stats is not None:
            self.prefix_cache_stats.reset = True
        return True

    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        return KVCacheBlocks(self.coordinator.get_blocks(request_id))

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return self.get_blocks(request_id).get_block_ids()

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        if self.enable_caching:
            self.coordinator.cache_blocks(request, num_computed_tokens)

    def new_step_starts(self) -> None:
        self.coordinator.new_step_starts()

    def take_block_copies(self) -> list[tuple[KVCacheBlock, KVCacheBlock]]:
        """This step's copy-on-write pairs (source, copy) of every group
        (`impl.core.partial_hits`); each block still holds its extra reference."""
        return [pair for manager in self.coordinator.managers
                for pair in manager.take_pending_copies()]

    def take_boundary_states(self) -> list[BoundaryState]:
        """The mamba 'align' states keyed since the last call, for a KV connector to store
        (`MambaAlignManager.offers_boundary_states`)."""
        return [state for manager in self.coordinator.managers
                if isinstance(manager, MambaAlignManager)
                for state in manager.take_boundary_states()]

    def take_events(self) -> list[KVCacheEvent]:
        return self.block_pool.take_events()

    def check_integrity(self, extra_holders: dict[int, int] | None = None) -> None:
        """Raise `IntegrityError` (survives `python -O`) if any cache structure is broken;
        `extra_holders`: block id -> references held outside the block tables."""
        self.coordinator.check_integrity(extra_holders)


__all__ = ["KVCacheBlock", "KVCacheBlocks", "KVCacheManager", "PrefixCacheStats"]
