"""`UpstreamKV`: upstream vLLM 0.32.0's KVCacheManager behind the `KVSystem` interface."""

from __future__ import annotations

from typing import Any

from conformance.kv.family import MAMBA_STATE_FLOATS, GroupShape, KVFamily
from conformance.kv.systems import BlockIds, Hit, Snapshot, _ids


class UpstreamKV:
    def __init__(self, family: KVFamily, none_hash: bytes, name: str = "upstream") -> None:
        self.name = name
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core import kv_cache_utils
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec

        hash_fn = get_hash_fn_by_name(family.hash_algo)
        kv_cache_utils.init_none_hash(hash_fn)
        kv_cache_utils.NONE_HASH = kv_cache_utils.BlockHash(none_hash)
        groups = [KVCacheGroupSpec([f"layer{i}"], upstream_spec(g))
                  for i, g in enumerate(family.groups)]
        config = KVCacheConfig(num_blocks=family.num_blocks, kv_cache_tensors=[],
                               kv_cache_groups=groups,
                               hash_block_size=family.effective_hash_block_size,
                               prefix_cache_retention_interval=family.retention_interval)
        self.manager = KVCacheManager(
            config, max_model_len=family.max_model_len,
            scheduler_block_size=family.scheduler_block_size,
            hash_block_size=family.effective_hash_block_size,
            enable_caching=family.enable_caching, log_stats=True, use_eagle=family.use_eagle,
            dcp_world_size=family.dcp_world_size,
        )
        self.block_hasher = kv_cache_utils.get_request_block_hasher(
            family.effective_hash_block_size, hash_fn)
        self.requests: dict[str, Any] = {}
        self.hits: dict[str, Any] = {}

    def add_request(self, request_id: str, tokens: list[int], cache_salt: str | None,
                    lora_name: str | None) -> None:
        from vllm.lora.request import LoRARequest
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        lora = LoRARequest(lora_name, 1, f"/loras/{lora_name}") if lora_name else None
        self.requests[request_id] = Request(
            request_id, list(tokens), SamplingParams(max_tokens=1 << 20), None,
            cache_salt=cache_salt, lora_request=lora, block_hasher=self.block_hasher,
        )

    def get_computed_blocks(self, request_id: str) -> Hit:
        request = self.requests[request_id]
        blocks, num, *junction = self.manager.get_computed_blocks(request)
        if junction:  # the scheduler pins the shared prefix's junction on the request
            request.shared_prefix_boundary = junction[0]
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
        return bool(self.manager.reset_prefix_cache())

    def evict_blocks(self, block_ids: tuple[int, ...]) -> None:
        self.manager.block_pool.evict_blocks(set(block_ids))

    def new_step(self) -> None:
        self.manager.new_step_starts()

    def cache_blocks(self, request_id: str, num_computed_tokens: int) -> None:
        self.manager.cache_blocks(self.requests[request_id], num_computed_tokens)

    def take_block_copies(self) -> tuple[tuple[int, int], ...]:
        copies, retained = self.manager.take_kv_cache_block_copies()
        self.manager.block_pool.free_blocks(retained)
        return tuple((c.src_block_id, c.dst_block_id) for c in copies)

    def snapshot(self) -> Snapshot:
        from vllm.v1.core.kv_cache_utils import get_block_hash, get_group_id

        pool = self.manager.block_pool
        cached: list[tuple[int, str]] = []
        cached_blocks: list[tuple[int, int, str]] = []
        for key, held in list(pool.cached_block_hash_to_block._cache.items()):
            group, hex_hash = get_group_id(key), bytes(get_block_hash(key)).hex()
            cached.append((group, hex_hash))
            blocks = held.values() if isinstance(held, dict) else (held,)
            cached_blocks.extend((block.block_id, group, hex_hash) for block in blocks)
        stats = self.manager.make_prefix_cache_stats()
        return Snapshot(
            num_free_blocks=pool.get_num_free_blocks(),
            free_queue=[b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
            cached=sorted(cached),
            tables={rid: tuple(tuple(ids) for ids in self.manager.get_block_ids(rid))
                    for rid in self.requests},
            block_hashes={rid: [bytes(h).hex() for h in r.block_hashes]
                          for rid, r in self.requests.items()},
            stats=(stats.requests, stats.queries, stats.hits, stats.preempted_requests,
                   stats.preempted_queries, stats.preempted_hits),
            cached_blocks=sorted(cached_blocks),
        )

    def check_integrity(self) -> None:
        """Upstream has no integrity check of its own; the comparison is the check."""


def upstream_spec(group: GroupShape) -> Any:
    import torch
    from vllm.v1 import kv_cache_interface as k

    common = {"num_kv_heads": 1, "head_size": 64, "dtype": torch.float32}
    if group.kind == "full":
        return k.FullAttentionSpec(block_size=group.block_size, **common)
    if group.kind == "sliding_window" and group.bounded_replay:
        # Upstream declares bounded replay only on its MLA sliding window (DeepSeek-V4.1).
        return k.SlidingWindowMLASpec(block_size=group.block_size, sliding_window=group.window,
                                      bounded_replay=True, **common)
    if group.kind == "sliding_window":
        return k.SlidingWindowSpec(block_size=group.block_size, sliding_window=group.window,
                                   **common)
    if group.kind == "circular_buffer":
        return k.CircularBufferSpec(block_size=group.block_size, **common)
    if group.kind == "cross_attention":
        return k.CrossAttentionSpec(block_size=group.block_size, **common)
    if group.kind == "reference_window":
        return k.RSWASpec(block_size=group.block_size, rswa_window=group.window, **common)
    if group.kind == "chunked_local":
        return k.ChunkedLocalAttentionSpec(block_size=group.block_size,
                                           attention_chunk_size=group.window, **common)
    return k.MambaSpec(block_size=group.block_size, shapes=((MAMBA_STATE_FLOATS,),),
                       dtypes=(torch.float32,),
                       mamba_cache_mode=group.mamba_cache_mode,
                       num_speculative_blocks=group.speculative_blocks)
