"""`SingleTypeKVCacheManager`: the block table of every request for one KV-cache group.

Subclasses differ in which blocks a request still needs (full attention keeps all of them,
sliding window and chunked local drop the ones left behind, mamba keeps one state) and in how a
prefix-cache hit is found. Block tables are append-only; a block a request no longer needs is
replaced in place by the null block so positions stay stable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.specs import KVCacheSpec
from vtwin.errors import IntegrityError

if TYPE_CHECKING:
    from impl.sched.request import Request


def reachable_boundaries(request: Request, eagle_block: int = 0) -> tuple[int, ...]:
    """Token positions where a later hit on `request`'s blocks can end: a resend of its
    prompt stops one token short of it, and a request sharing a prefix with it stops at
    their junction (`shared_prefix_boundary`, when the lookup found one).

    `eagle_block`: with an EAGLE drafter whose hits give up a block, the scheduler block
    size. A hit then lands one block below where the resend's (prompt - 1) and a longer
    sibling's (the prompt's last whole block) runs end, so both are kept."""
    junction = request.shared_prefix_boundary
    tail = (junction,) if junction else ()
    if not eagle_block:
        return (request.num_prompt_tokens - 1, *tail)
    resend = (request.num_prompt_tokens - 1) // eagle_block * eagle_block
    extension = request.num_prompt_tokens // eagle_block * eagle_block
    return (*sorted({max(resend - eagle_block, 0), max(extension - eagle_block, 0)}), *tail)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class SingleTypeKVCacheManager:
    #: Whether a cache hit for this type is found by a scan from the left (full attention).
    scans_from_left: ClassVar[bool] = True
    #: Whether this type gets no slots for a drafter's lookahead tokens (mamba 'align': drafters
    #: have no state layers, and slots past the scheduled tokens would break the alignment).
    ignores_lookahead: ClassVar[bool] = False
    #: Whether this type is sized by the encoder's tokens, not the decoder's (cross-attention
    #: of an encoder-decoder model, `impl.core.cross_attention`).
    sized_by_encoder: ClassVar[bool] = False
    #: Whether this type can look up a hit ending inside a block (`impl.core.partial_hits`).
    looks_up_sub_block_hits: ClassVar[bool] = False

    def __init__(
        self,
        kv_cache_spec: KVCacheSpec,
        block_pool: BlockPool,
        enable_caching: bool,
        kv_cache_group_id: int,
    ) -> None:
        self.kv_cache_spec = kv_cache_spec
        self.block_size = kv_cache_spec.block_size
        self.block_pool = block_pool
        self.enable_caching = enable_caching
        self.kv_cache_group_id = kv_cache_group_id
        self.null_block = block_pool.null_block
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # Number of leading blocks of each request already indexed in the prefix cache.
        self.num_cached_block: dict[str, int] = {}
        # Per-request cap of the full-sequence admission gate, for types that recycle blocks
        # (sliding window, chunked local); None: the whole sequence counts. Set by the manager.
        self.admission_cap_blocks: int | None = None
        # Granularity of request block hashes (set by the coordinator; may be finer).
        self.hash_block_size = self.block_size
        # Granularity of prefix-cache hits (set by the coordinator; the lcm in hybrid models).
        self.cache_hit_alignment = self.block_size
        # The scheduler's block (set by the coordinator in hybrid models: the lcm of the
        # groups' blocks), coarser than the hit alignment under sub-block hits.
        self.scheduler_block_size = self.block_size
        # None: cache every block that could serve a hit; 0: only what a prompt replay reaches.
        self.retention_interval: int | None = None
        # An EAGLE drafter (set by the coordinator): hits give up their last block, so a hit
        # may end one block past the aligned prefix and the prompt's whole tail is reachable.
        self.use_eagle = False
        # 0.33 (`Behaviour.eagle_junction_block_below`, set by the scheduler): with EAGLE, the
        # block below a shared prefix's junction is reachable too.
        self.eagle_junction_block_below = False
        # Sub-block hits (set by the coordinator, `impl.core.partial_hits`): a hit may end
        # inside a block, whose shared content the request then copies into a block of its own.
        self.partial_hits = False
        # Requests whose hit ends inside a block: (its index, the shared block), until the
        # allocation that gives them their private copy.
        self.partial_hit_reqs: dict[str, tuple[int, KVCacheBlock]] = {}
        # (source, copy) pairs made this step; both keep an extra reference until the step's
        # scheduler output carries the copy (`take_pending_copies`).
        self.pending_copies: list[tuple[KVCacheBlock, KVCacheBlock]] = []

    # -- sizing ----------------------------------------------------------------------------
    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Leading tokens whose KV this type no longer needs (none for full attention)."""
        return 0

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int,
        apply_admission_cap: bool,
    ) -> int:
        """Blocks the pool must hand out to give the request `num_tokens` slots.

        Prefix-hit blocks that sit free in the queue count too: touching them takes them out of
        the free pool just like an allocation would. `apply_admission_cap`: the admission gate
        asks for the whole sequence, but a type that recycles blocks never holds more than
        `admission_cap_blocks` of them at once, so that is all the gate reserves.
        """
        num_required = cdiv(num_tokens, self.block_size)
        if apply_admission_cap and self.admission_cap_blocks is not None:
            num_required = min(num_required, self.admission_cap_blocks)
        held = self.req_to_blocks.get(request_id)
        num_held = len(held) if held is not None else 0
        num_skipped_blocks = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        if num_held == 0 and num_skipped_blocks > 0:
            # Blocks left of the window are never allocated: they become null blocks.
            num_new = num_required - max(num_skipped_blocks, len(new_computed_blocks))
            live_hits = new_computed_blocks[num_skipped_blocks:]
        else:
            num_new = num_required - len(new_computed_blocks) - num_held
            live_hits = new_computed_blocks
        num_evictable = 0
        for block in live_hits:
            if block.ref_cnt == 0 and not block.is_null:
                num_evictable += 1
        # A hit ending inside a block needs one more: the private copy of that block.
        num_copies = int(self.has_partial_hit(new_computed_blocks, total_computed_tokens))
        return max(num_new, 0) + num_evictable + num_copies

    def has_partial_hit(self, new_computed_blocks: Sequence[KVCacheBlock],
                        num_computed_tokens: int) -> bool:
        """Whether a new request's prefix hit ends inside one of this type's blocks (only with
        sub-block hits on). Computed tokens past the hit's last block are a connector's,
        loaded into fresh blocks: the local hit then ends on a whole block
        (`impl.sched.admission` cuts a sub-block tail a longer load supersedes)."""
        num_hit = len(new_computed_blocks)
        return (self.partial_hits and num_hit > 0 and num_computed_tokens % self.block_size != 0
                and num_computed_tokens < num_hit * self.block_size)

    # -- allocation ------------------------------------------------------------------------
    def add_computed_blocks(
        self, request_id: str, new_computed_blocks: Sequence[KVCacheBlock], total_computed: int
    ) -> None:
        """Take prefix-hit blocks into a new request's table (touching them)."""
        blocks = self.req_to_blocks.setdefault(request_id, [])
        if request_id in self.num_cached_block:
            assert not new_computed_blocks, "a running request cannot get new prefix hits"
            return
        num_skipped_blocks = self.get_num_skipped_tokens(total_computed) // self.block_size
        if num_skipped_blocks > 0:
            # Hits left of the window are not needed: pad with null blocks instead.
            live = new_computed_blocks[num_skipped_blocks:]
            pad = max(num_skipped_blocks, len(new_computed_blocks)) - len(live)
            self.block_pool.touch(live)
            blocks.extend([self.null_block] * pad)
            blocks.extend(live)
        else:
            self.block_pool.touch(new_computed_blocks)
            blocks.extend(new_computed_blocks)
        # Every block so far is a hit or a null pad (more pads than hits only when a connector
        # supplies tokens past the hits).
        self.num_cached_block[request_id] = len(blocks)
        if self.has_partial_hit(new_computed_blocks, total_computed):
            # The hit's last block is shared but only partly ours: the next allocation swaps
            # in a private copy, which is cached again once it is full.
            index = total_computed // self.block_size
            self.partial_hit_reqs[request_id] = (index, blocks[index])
            self.num_cached_block[request_id] = index

    def copy_on_write(self, request_id: str) -> KVCacheBlock | None:
        """Swap a partial hit's shared block in the request's table for a fresh private copy
        (None: no partial hit pending). The shared block keeps the request's reference and
        the copy takes one more, until the step's output carries the copy."""
        pending = self.partial_hit_reqs.pop(request_id, None)
        if pending is None:
            return None
        copy = self.block_pool.get_new_blocks(1)[0]
        self.swap_in_copy(request_id, pending, copy)
        return copy

    def swap_in_copy(self, request_id: str, partial: tuple[int, KVCacheBlock],
                     copy: KVCacheBlock) -> None:
        """Put `copy` in place of the shared block at `partial` (index, block) in the
        request's table; both ends keep a reference until the step's output carries them."""
        index, source = partial
        blocks = self.req_to_blocks[request_id]
        assert blocks[index] is source and source.ref_cnt > 0
        blocks[index] = copy
        copy.ref_cnt += 1
        self.pending_copies.append((source, copy))

    def take_pending_copies(self) -> list[tuple[KVCacheBlock, KVCacheBlock]]:
        """This step's (source, copy) pairs, each block still holding its extra reference."""
        pending, self.pending_copies = self.pending_copies, []
        return pending

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """Blocks up to `num_tokens` slots, after a partial hit's private copy (taken first)."""
        copy = self.copy_on_write(request_id) if self.partial_hit_reqs else None
        blocks = self.req_to_blocks.setdefault(request_id, [])
        num_new = cdiv(num_tokens, self.block_size) - len(blocks)
        if num_new <= 0:
            return [] if copy is None else [copy]
        new_blocks = self.block_pool.get_new_blocks(num_new)
        blocks.extend(new_blocks)
        return new_blocks if copy is None else [copy, *new_blocks]

    def cache_blocks(self, request: Request, block_hashes: Sequence[BlockHash],
                     num_tokens: int) -> None:
        """Index the request's blocks that became full, up to `num_tokens` tokens and as far
        as the request has hashes (hashes that cover the next token come one token later)."""
        request_id = request.request_id
        num_cached = self.num_cached_block.get(request_id, 0)
        num_full = min(num_tokens // self.block_size, len(block_hashes))
        if num_full <= num_cached:
            return
        self.block_pool.cache_full_blocks(
            self.req_to_blocks[request_id], block_hashes, num_cached, num_full,
            self.kv_cache_group_id, block_size=self.block_size,
            # Only events carry tokens: reading `all_token_ids` builds the request's list.
            token_ids=request.all_token_ids if self.block_pool.enable_kv_cache_events else (),
            lora_name=request.lora_name,
            block_mask=self.reachable_block_mask(num_cached, num_full,
                                                 self.reachable_boundaries(request)),
        )
        self.num_cached_block[request_id] = num_full

    def reachable_boundaries(self, request: Request) -> tuple[int, ...]:
        """`reachable_boundaries` for this group: with EAGLE's block drop, at the scheduler
        block (the hit alignment, or with sub-block hits the coarser block the replay's run
        ends on: a hash unit would put the boundary past what the resend reaches)."""
        eagle_block = self.scheduler_block_size if self.partial_hits else self.cache_hit_alignment
        boundaries = reachable_boundaries(request, eagle_block if self.use_eagle else 0)
        junction = request.shared_prefix_boundary
        if junction and self.use_eagle and self.eagle_junction_block_below:
            return (*boundaries, junction - self.block_size)
        return boundaries

    def reachable_block_mask(self, start_block: int, end_block: int,
                             boundaries: tuple[int, ...]) -> list[bool] | None:
        """Which of blocks [start, end) are worth indexing; None means all of them."""
        return None

    def replay_tail_mask(self, start_block: int, end_block: int, boundaries: tuple[int, ...],
                         needed: int, shift: int = 0) -> list[bool]:
        """Sparse retention: keep only the `needed` blocks ending at each reachable boundary.

        A request resending the prompt hits at most num_prompt_tokens - 1 tokens, and one
        sharing a prefix with it stops at the junction where they part; each, aligned down to
        the hit alignment, is where a hit can end, and a group that needs only the tail before
        a hit point must keep just that tail (`reachable_boundaries`). `shift` 1: an EAGLE
        hit's run ends one block past its boundary (it matches the block above, then gives
        it back)."""
        alignment = self.cache_hit_alignment
        keep = [False] * (end_block - start_block)
        for boundary in boundaries:
            boundary_block = boundary // alignment * alignment // self.block_size + shift
            for index in range(max(start_block, boundary_block - needed),
                               min(end_block, boundary_block)):
                keep[index - start_block] = True
        return keep

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int,
                              num_prompt_tokens: int) -> None:
        """Free the blocks this type no longer needs, replacing them by the null block.
        `num_prompt_tokens` matters only to types that drop a middle range
        (`ReferenceWindowManager`)."""
        num_skipped_blocks = self.get_num_skipped_tokens(num_computed_tokens) // self.block_size
        if num_skipped_blocks > 0:
            self.remove_blocks_in_range(request_id, 0, num_skipped_blocks)

    def remove_blocks_in_range(self, request_id: str, first: int, end: int) -> None:
        """Free the request's blocks with index in [first, end) (capped by its table).

        Walks back from the last one and stops at the first null block: everything before it
        was already removed by an earlier call.
        """
        blocks = self.req_to_blocks.get(request_id)
        if not blocks or first >= end:
            return
        removed: list[KVCacheBlock] = []
        null_block = self.null_block
        for index in range(min(end, len(blocks)) - 1, first - 1, -1):
            block = blocks[index]
            if block is null_block:
                break
            removed.append(block)
            blocks[index] = null_block
        self.block_pool.free_blocks(removed)

    def free(self, request_id: str) -> None:
        """Release all blocks of the request, tail first: the tail is the least reusable."""
        blocks = self.pop_blocks_for_free(request_id)
        if blocks:
            # The table is ours now: reversed in place rather than copied (a finished
            # request of a long-prompt trace holds hundreds of blocks; the copy through
            # `reversed()` cost 3-4% of a conversation-trace replay, perf).
            blocks.reverse()
            self.block_pool.free_blocks(blocks)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Forget the request and hand back its blocks, in table order, still referenced: the
        caller frees them (tail first), possibly later (a step in flight may still write)."""
        self.num_cached_block.pop(request_id, None)
        self.partial_hit_reqs.pop(request_id, None)
        return self.req_to_blocks.pop(request_id, None) or []

    def allocate_external_computed_blocks(self, request_id: str, num_local_computed: int,
                                          num_external: int) -> None:
        """Fresh blocks for tokens a KV connector will load, after every group took its local
        hits (so one group's allocation cannot evict another's hits). Tokens this type skips
        (left of a window) get none."""
        total = num_local_computed + num_external
        num_skipped = self.get_num_skipped_tokens(total)
        if num_skipped > 0:
            num_external = min(total - num_skipped, num_external)
        if num_external <= 0:
            return
        blocks = self.req_to_blocks[request_id]
        num_new = max(0, cdiv(total, self.block_size) - len(blocks))
        blocks.extend(self.block_pool.get_new_blocks(num_new))

    def new_step_starts(self) -> None:
        """A scheduler step begins (subclasses reset per-step state)."""

    # -- prefix cache ----------------------------------------------------------------------
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
        """Per group, the longest run of cached blocks usable as a prefix, and its length.

        `drop_eagle_block`: an EAGLE drafter writes the KV of the token after each chunk into
        the chunk's last block, so a hit must give up its last block (full attention, sliding
        window); the coordinator lets such a search look one block further first."""
        raise NotImplementedError

    def check_integrity(self) -> None:
        """Raise `IntegrityError` if a table holds a free block or over-counts cached blocks.

        Conservation per group: a request's cached prefix is part of its table, so it cannot be
        longer than the table (prefix caching off never caches, so there it is not checked).
        """
        for request_id, blocks in self.req_to_blocks.items():
            num_cached = self.num_cached_block.get(request_id, 0)
            if self.enable_caching and num_cached > len(blocks):
                raise IntegrityError(f"group {self.kv_cache_group_id}: {request_id} has "
                                     f"{num_cached} cached of {len(blocks)} blocks")
            for block in blocks:
                if not block.is_null and block.ref_cnt <= 0:
                    raise IntegrityError(f"group {self.kv_cache_group_id}: {request_id} "
                                         f"holds free {block}")
