"""A circular buffer (a ring): one block per request for its whole life, no prefix cache.

Some models keep a small per-request scratch beside their attention KV, e.g. the raw keys of
the token group an indexer is still compressing (GLM-5.3-Flash's indexer tail). It is one
block used as a ring: written over and over, never shared, so it takes no part in prefix
caching (no hit search, nothing indexed) and nothing in it is ever skipped. A request claims
its block the first time it is allocated for, whatever the token count, and gives it back
when it is freed or preempted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.single_type_manager import SingleTypeKVCacheManager
from impl.core.specs import KVCacheSpec
from vtwin.errors import IntegrityError

if TYPE_CHECKING:
    from impl.sched.request import Request


class CircularBufferManager(SingleTypeKVCacheManager):
    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int,
        apply_admission_cap: bool,
    ) -> int:
        """The ring's one block, until the request holds it."""
        return 0 if self.req_to_blocks.get(request_id) else 1

    def add_computed_blocks(
        self, request_id: str, new_computed_blocks: Sequence[KVCacheBlock], total_computed: int
    ) -> None:
        """A ring has no prefix hits to take."""
        self.req_to_blocks.setdefault(request_id, [])

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        return self._claim(request_id)

    def allocate_external_computed_blocks(self, request_id: str, num_local_computed: int,
                                          num_external: int) -> None:
        self._claim(request_id)

    def _claim(self, request_id: str) -> list[KVCacheBlock]:
        blocks = self.req_to_blocks.setdefault(request_id, [])
        if blocks:
            return []
        blocks.extend(self.block_pool.get_new_blocks(1))
        return list(blocks)

    def cache_blocks(self, request: Request, block_hashes: Sequence[BlockHash],
                     num_tokens: int) -> None:
        """Nothing is indexed: the ring is overwritten as the request goes on."""

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int,
                              num_prompt_tokens: int) -> None:
        """The ring's block is needed to the end."""

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        kv_cache_group_ids: Sequence[int],
        block_pool: BlockPool,
        kv_cache_spec: KVCacheSpec,
        alignment_tokens: int,
        drop_eagle_block: bool = False,
    ) -> tuple[list[list[KVCacheBlock]], int]:
        return [[] for _ in kv_cache_group_ids], 0

    def check_integrity(self) -> None:
        """Besides the common checks: a request holds at most its one ring block."""
        super().check_integrity()
        for request_id, blocks in self.req_to_blocks.items():
            if len(blocks) > 1:
                raise IntegrityError(f"group {self.kv_cache_group_id}: {request_id} holds "
                                     f"{len(blocks)} ring blocks")
