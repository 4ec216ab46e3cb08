"""The two KV-cache systems behind one interface: `ImplKV` (the twin) and `UpstreamKV` (vLLM).

Each adapter owns its requests by id and exposes the operations a scheduler performs, plus a
canonical `snapshot()` of everything observable. Upstream is imported lazily, only here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from conformance.kv.family import MAMBA_STATE_FLOATS, GroupShape, KVFamily

BlockIds = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class Hit:
    block_ids: BlockIds
    num_tokens: int


@dataclass(slots=True)
class Snapshot:
    num_free_blocks: int
    free_queue: list[int]
    cached: list[tuple[int, str]]  # (group id, block hash hex)
    tables: dict[str, BlockIds]
    block_hashes: dict[str, list[str]]
    stats: tuple[int, ...] = field(default_factory=tuple)
    # Every prefix-cache entry as (block id, group id, block hash hex), duplicates included:
    # which physical block holds each cached hash (what targeted evictions pick from).
    cached_blocks: list[tuple[int, int, str]] = field(default_factory=list)


class KVSystem(Protocol):
    #: How failure messages label this side ("impl", "upstream", a fork's name).
    name: str

    def add_request(self, request_id: str, tokens: list[int], cache_salt: str | None,
                    lora_name: str | None) -> None: ...
    def get_computed_blocks(self, request_id: str) -> Hit: ...
    def allocate_slots(self, request_id: str, num_new_tokens: int, num_lookahead: int,
                       use_hit: bool, full_sequence_must_fit: bool = False,
                       delay_cache_blocks: bool = False,
                       num_encoder_tokens: int = 0) -> BlockIds | None: ...
    def cache_blocks(self, request_id: str, num_computed_tokens: int) -> None: ...
    def take_block_copies(self) -> tuple[tuple[int, int], ...]: ...
    def set_num_computed_tokens(self, request_id: str, value: int) -> None: ...
    def append_token(self, request_id: str, token: int) -> None: ...
    def free(self, request_id: str, preempted: bool) -> None: ...
    def reset_prefix_cache(self) -> bool: ...
    def evict_blocks(self, block_ids: tuple[int, ...]) -> None: ...
    def new_step(self) -> None: ...
    def snapshot(self) -> Snapshot: ...
    def check_integrity(self) -> None: ...


def _ids(per_group: Any) -> BlockIds:
    return tuple(tuple(block.block_id for block in group) for group in per_group)


class ImplKV:
    def __init__(self, family: KVFamily, none_hash: bytes, name: str = "impl") -> None:
        self.name = name
        from impl.core.context_parallel import dcp_scheduler_view
        from impl.core.kv_cache_manager import KVCacheManager
        from impl.core.request_hasher import RequestBlockHasher
        from impl.core.specs import KVCacheConfig, KVCacheGroupSpec

        groups = tuple(KVCacheGroupSpec((f"layer{i}",), impl_spec(g))
                       for i, g in enumerate(family.groups))
        config = KVCacheConfig(family.num_blocks, groups,
                               prefix_cache_retention_interval=family.retention_interval)
        self.manager = KVCacheManager(
            dcp_scheduler_view(config, family.dcp_world_size),
            family.max_model_len,
            hash_block_size=family.effective_hash_block_size,
            enable_caching=family.enable_caching, log_stats=True,
            enable_kv_cache_events=False, use_eagle=family.use_eagle,
        )
        self.hasher = RequestBlockHasher(family.effective_hash_block_size, family.hash_algo,
                                         none_hash)
        self.requests: dict[str, Any] = {}
        self.hits: dict[str, Any] = {}

    def add_request(self, request_id: str, tokens: list[int], cache_salt: str | None,
                    lora_name: str | None) -> None:
        from impl.sched.request import Request

        self.requests[request_id] = Request(
            request_id, tokens, cache_salt=cache_salt, lora_name=lora_name,
            lora_path=f"/loras/{lora_name}" if lora_name else None, block_hasher=self.hasher,
        )

    def get_computed_blocks(self, request_id: str) -> Hit:
        blocks, num = self.manager.get_computed_blocks(self.requests[request_id])
        self.hits[request_id] = (blocks, num)
        self.manager.record_prefix_cache_stats(self.requests[request_id], num)
        return Hit(_ids(blocks.blocks), num)

    def allocate_slots(self, request_id: str, num_new_tokens: int, num_lookahead: int,
                       use_hit: bool, full_sequence_must_fit: bool = False,
                       delay_cache_blocks: bool = False,
                       num_encoder_tokens: int = 0) -> BlockIds | None:
        request = self.requests[request_id]
        blocks, num = self.hits.pop(request_id) if use_hit else (None, 0)
        result = self.manager.allocate_slots(
            request, num_new_tokens, num, blocks, num_lookahead_tokens=num_lookahead,
            full_sequence_must_fit=full_sequence_must_fit,
            delay_cache_blocks=delay_cache_blocks, num_encoder_tokens=num_encoder_tokens)
        return None if result is None else _ids(result.blocks)

    def set_num_computed_tokens(self, request_id: str, value: int) -> None:
        self.requests[request_id].num_computed_tokens = value

    def append_token(self, request_id: str, token: int) -> None:
        self.requests[request_id].append_output_token_ids(token)

    def free(self, request_id: str, preempted: bool) -> None:
        request = self.requests[request_id]
        self.manager.free(request)
        if preempted:
            request.num_computed_tokens = 0
            request.num_preemptions += 1

    def reset_prefix_cache(self) -> bool:
        return self.manager.reset_prefix_cache()

    def evict_blocks(self, block_ids: tuple[int, ...]) -> None:
        self.manager.block_pool.evict_blocks(block_ids)

    def new_step(self) -> None:
        self.manager.new_step_starts()

    def cache_blocks(self, request_id: str, num_computed_tokens: int) -> None:
        self.manager.cache_blocks(self.requests[request_id], num_computed_tokens)

    def take_block_copies(self) -> tuple[tuple[int, int], ...]:
        """The copy-on-write pairs of the allocations so far, their references dropped as the
        scheduler does once its output carries them."""
        pairs = self.manager.take_block_copies()
        self.manager.block_pool.free_blocks([block for pair in pairs for block in pair])
        return tuple((source.block_id, copy.block_id) for source, copy in pairs)

    def snapshot(self) -> Snapshot:
        pool = self.manager.block_pool
        stats = self.manager.make_prefix_cache_stats()
        assert stats is not None
        return Snapshot(
            num_free_blocks=pool.get_num_free_blocks(),
            free_queue=pool.free_block_queue.block_ids(),
            cached=sorted((g, h.hex()) for g, h in pool.cached_hashes()),
            tables={rid: tuple(tuple(ids) for ids in self.manager.get_block_ids(rid))
                    for rid in self.requests},
            block_hashes={rid: [h.hex() for h in r.block_hashes]
                          for rid, r in self.requests.items()},
            stats=(stats.requests, stats.queries, stats.hits, stats.preempted_requests,
                   stats.preempted_queries, stats.preempted_hits),
            cached_blocks=sorted((block.block_id, g, h.hex()) for g, m in pool.maps_by_group()
                                 for h, block in m.items()),
        )

    def check_integrity(self) -> None:
        self.manager.check_integrity()


def impl_spec(group: GroupShape) -> Any:
    from impl.core import specs

    if group.kind == "full":
        return specs.FullAttentionSpec(block_size=group.block_size)
    if group.kind == "sliding_window":
        return specs.SlidingWindowSpec(block_size=group.block_size, sliding_window=group.window,
                                       bounded_replay=group.bounded_replay)
    if group.kind == "circular_buffer":
        return specs.CircularBufferSpec(block_size=group.block_size)
    if group.kind == "cross_attention":
        return specs.CrossAttentionSpec(block_size=group.block_size)
    if group.kind == "reference_window":
        return specs.ReferenceWindowSpec(block_size=group.block_size, rswa_window=group.window)
    if group.kind == "chunked_local":
        return specs.ChunkedLocalAttentionSpec(block_size=group.block_size,
                                               attention_chunk_size=group.window)
    return specs.MambaSpec(block_size=group.block_size, mamba_cache_mode=group.mamba_cache_mode,
                           num_speculative_blocks=group.speculative_blocks,
                           state_bytes=4 * MAMBA_STATE_FLOATS)
