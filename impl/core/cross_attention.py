"""Cross-attention blocks of an encoder-decoder model (Whisper): the encoder's keys and values.

The decoder of an encoder-decoder model attends, in its cross-attention layers, to the
encoder's output for the request's one input (an utterance's audio). Those keys and values
take one slot per encoder embedding, are written once (the step that runs the encoder) and
read by every decoder step after it. So the group is sized by the encoder's tokens, not the
decoder's: the scheduler passes them (`num_encoder_tokens`) on the step that encodes the input,
and 0 afterwards, which asks for nothing more. Encoder outputs are unique to a request, so the
group has no prefix cache (encoder-decoder models run with prefix caching off), and nothing in
it is skipped until the request is freed or preempted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.single_type_manager import SingleTypeKVCacheManager
from impl.core.specs import KVCacheSpec

if TYPE_CHECKING:
    from impl.sched.request import Request


class CrossAttentionManager(SingleTypeKVCacheManager):
    sized_by_encoder: ClassVar[bool] = True

    def add_computed_blocks(
        self, request_id: str, new_computed_blocks: Sequence[KVCacheBlock], total_computed: int
    ) -> None:
        """Cross-attention takes no prefix hits (the request's table starts empty)."""
        if new_computed_blocks:
            raise ValueError("cross-attention blocks are never shared between requests")
        super().add_computed_blocks(request_id, new_computed_blocks, total_computed)

    def allocate_external_computed_blocks(self, request_id: str, num_local_computed: int,
                                          num_external: int) -> None:
        """A connector never supplies the encoder's keys and values."""

    def cache_blocks(self, request: Request, block_hashes: Sequence[BlockHash],
                     num_tokens: int) -> None:
        """Nothing is indexed: encoder outputs are private to their request."""

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int,
                              num_prompt_tokens: int) -> None:
        """Every decoder step reads the whole encoder output."""

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
        raise ValueError("cross-attention has no prefix cache (encoder-decoder models run "
                         "with prefix caching off)")
