"""A KV-cache configuration family: the shape of the cache both systems are built with."""

from __future__ import annotations

import math
from dataclasses import dataclass

from workloads.model import EngineConfig, KVCacheGroup

MAMBA_STATE_FLOATS = 16
"""A mamba group's state in the harness's model: 16 float32 values (64 bytes) on both sides,
so byte budgets computed from page sizes (0.33's sync-load budget) agree."""


@dataclass(frozen=True, slots=True)
class GroupShape:
    """One KV-cache group: kind is full | sliding_window | chunked_local | mamba |
    reference_window | circular_buffer | cross_attention.

    `mamba_cache_mode` ("none" or "align") applies to mamba groups only; upstream reads it from
    its cache config into the group's MambaSpec, so both must say the same.
    """

    kind: str
    block_size: int
    window: int = 0  # sliding window, attention chunk size or reference window
    mamba_cache_mode: str = "none"
    bounded_replay: bool = False  # sliding windows only: no prefix cache, replayed after a hit
    # Mamba only: state blocks kept past the running one for the drafts of speculative
    # decoding (vLLM sets one per speculative token; 0 without spec decode).
    speculative_blocks: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("full", "sliding_window", "chunked_local", "mamba",
                             "reference_window", "circular_buffer", "cross_attention"):
            raise ValueError(f"kind: unknown group kind {self.kind!r}")
        if self.block_size < 1:
            raise ValueError(f"block_size: must be >= 1 (got {self.block_size})")
        if self.mamba_cache_mode not in ("none", "align"):
            raise ValueError(f"mamba_cache_mode: must be 'none' or 'align' "
                             f"(got {self.mamba_cache_mode!r})")
        if self.mamba_cache_mode != "none" and self.kind != "mamba":
            raise ValueError(f"mamba_cache_mode: only for mamba groups (got kind {self.kind!r})")
        if self.bounded_replay and self.kind != "sliding_window":
            raise ValueError(f"bounded_replay: only for sliding windows (got kind {self.kind!r})")
        if self.speculative_blocks and self.kind != "mamba":
            raise ValueError(f"speculative_blocks: only for mamba groups (got kind {self.kind!r})")


@dataclass(frozen=True, slots=True)
class KVFamily:
    name: str
    groups: tuple[GroupShape, ...]
    num_blocks: int
    enable_caching: bool = True
    hash_algo: str = "sha256"
    hash_block_size: int | None = None
    max_model_len: int = 4096
    # Sparse prefix-cache retention for sliding-window/mamba groups (None: dense; 0: the
    # engine default, keep only what a replay of the prompt can reach).
    retention_interval: int | None = None
    # An EAGLE drafter under vLLM 0.32's rule: every group's hit gives up its last block.
    use_eagle: bool = False
    # Decode context parallelism: full-attention blocks span this many ranks' tokens.
    dcp_world_size: int = 1

    @property
    def has_cross_attention(self) -> bool:
        """An encoder-decoder model: admissions also write the encoder's output."""
        return any(g.kind == "cross_attention" for g in self.groups)

    @property
    def scheduler_block_sizes(self) -> tuple[int, ...]:
        """Each group's block as the scheduler counts it (DCP scales full attention's)."""
        return tuple(g.block_size * (self.dcp_world_size if g.kind == "full" else 1)
                     for g in self.groups)

    @property
    def scheduler_block_size(self) -> int:
        return math.lcm(*self.scheduler_block_sizes)

    @property
    def effective_hash_block_size(self) -> int:
        if self.hash_block_size is not None:
            return self.hash_block_size
        return math.gcd(*self.scheduler_block_sizes)


FAMILIES: tuple[KVFamily, ...] = (
    KVFamily("full_bs16", (GroupShape("full", 16),), num_blocks=24),
    KVFamily("full_bs32", (GroupShape("full", 32),), num_blocks=16),
    KVFamily("full_no_prefix_cache", (GroupShape("full", 16),), num_blocks=24,
             enable_caching=False),
    KVFamily("full_sliding_window", (GroupShape("full", 16), GroupShape("sliding_window", 16, 48)),
             num_blocks=40),
    # Window smaller than the hit alignment (lcm 32): some window blocks can never serve a hit.
    KVFamily("sliding_window_sparse",
             (GroupShape("full", 32), GroupShape("sliding_window", 16, 16)), num_blocks=40),
    KVFamily("full_chunked_local", (GroupShape("full", 16), GroupShape("chunked_local", 16, 64)),
             num_blocks=40),
    KVFamily("full_mamba", (GroupShape("full", 16), GroupShape("mamba", 16)), num_blocks=40),
    # Mamba 'align': one new state block per allocation, null gaps, retirement behind the
    # processed position (the scheduler's block-aligned split is not part of this level).
    KVFamily("full_mamba_align",
             (GroupShape("full", 16), GroupShape("mamba", 16, mamba_cache_mode="align")),
             num_blocks=40),
    # The engine's default retention (0): hybrid groups keep only the prompt-replay tail.
    KVFamily("sliding_window_retention0",
             (GroupShape("full", 16), GroupShape("sliding_window", 16, 48)), num_blocks=40,
             retention_interval=0),
    KVFamily("mamba_retention0", (GroupShape("full", 16), GroupShape("mamba", 16)),
             num_blocks=40, retention_interval=0),
    # A retention interval: also the tails (states) ending each 64-token (48-token) segment.
    KVFamily("sliding_window_retention64",
             (GroupShape("full", 16), GroupShape("sliding_window", 16, 48)), num_blocks=40,
             retention_interval=64),
    KVFamily("mamba_align_retention48",
             (GroupShape("full", 16), GroupShape("mamba", 16, mamba_cache_mode="align")),
             num_blocks=40, retention_interval=48),
    # Hashes at 16 tokens, full-attention blocks of 32: a group block holds two hash blocks.
    KVFamily("hash_block_smaller", (GroupShape("full", 32), GroupShape("sliding_window", 16, 48)),
             num_blocks=40),
    # Windows that are not a multiple of the block size: smaller than one block, one token past
    # three blocks (the window then straddles one more block than window // block_size).
    KVFamily("sliding_window_lt_block",
             (GroupShape("full", 16), GroupShape("sliding_window", 16, 5)), num_blocks=40),
    KVFamily("sliding_window_k_block_plus1",
             (GroupShape("full", 16), GroupShape("sliding_window", 16, 49)), num_blocks=40),
    # Window group with larger blocks than full attention (the reverse of sliding_window_sparse).
    KVFamily("sliding_window_larger_blocks",
             (GroupShape("full", 16), GroupShape("sliding_window", 32, 40)), num_blocks=40),
    # Hashes at 8 tokens under equal 16-token blocks: every group block holds two hash blocks.
    KVFamily("hybrid_hash_block_8",
             (GroupShape("full", 16), GroupShape("sliding_window", 16, 48)), num_blocks=40,
             hash_block_size=8),
    KVFamily("mamba_hash_block_8", (GroupShape("full", 16), GroupShape("mamba", 16)),
             num_blocks=40, hash_block_size=8),
    # Mamba 'align' with hashes at 4 under 16-token blocks: hits ending inside a block, the
    # copy-on-write of the shared blocks, a running request's prompt-tail state moved to a
    # copy (`impl.core.partial_hits`); and beside a window, which turns the hits off.
    KVFamily("mamba_align_sub_block",
             (GroupShape("full", 16), GroupShape("mamba", 16, mamba_cache_mode="align")),
             num_blocks=40, hash_block_size=4),
    KVFamily("window_mamba_align_sub_block",
             (GroupShape("full", 16), GroupShape("sliding_window", 16, 48),
              GroupShape("mamba", 16, mamba_cache_mode="align")), num_blocks=48,
             hash_block_size=4),
    # Mamba blocks of 16 under a hit alignment of 32 (full attention at 32): only every other
    # mamba state can serve a hit. And the reverse: mamba blocks larger than attention's.
    KVFamily("mamba_alignment_32", (GroupShape("full", 32), GroupShape("mamba", 16)),
             num_blocks=40),
    KVFamily("mamba_larger_blocks", (GroupShape("full", 16), GroupShape("mamba", 32)),
             num_blocks=40),
    # Three attention types in one model.
    KVFamily("full_window_mamba", (GroupShape("full", 16), GroupShape("sliding_window", 16, 48),
                                   GroupShape("mamba", 16)), num_blocks=48),
    KVFamily("full_window_chunked", (GroupShape("full", 16), GroupShape("sliding_window", 16, 48),
                                     GroupShape("chunked_local", 16, 64)), num_blocks=48),
    # Reference sliding windows (R-SWA): the prompt kept, the output beyond the window dropped;
    # alone (one group) and beside full attention, a window smaller than a block and not.
    # Blocks of 4 so that a few decode steps already open a gap.
    KVFamily("reference_window", (GroupShape("reference_window", 4, 2),), num_blocks=48),
    KVFamily("full_reference_window", (GroupShape("full", 4),
                                       GroupShape("reference_window", 4, 3)), num_blocks=96),
    # Two groups of the same full-attention spec (layers split in two groups, as the hybrid
    # planner does beside a window group): one hit search serves both groups at once.
    KVFamily("two_full_groups_window", (GroupShape("full", 16), GroupShape("full", 16),
                                        GroupShape("sliding_window", 16, 48)), num_blocks=48),
    # A bounded-replay window (DeepSeek-V4.1): no prefix cache of its own, so it takes no part
    # in the hit search (its hit stays empty) and indexes nothing; beside a plain window of the
    # same size (a different spec: not looked up together).
    # EAGLE (0.32's trailing-block drop): alone, beside a window, and with a window under a
    # coarser hit alignment (full blocks of 32, window blocks of 16: the window's search looks
    # one of its blocks past the candidate and must land aligned after the drop; groups index
    # one block past the aligned prefix).
    KVFamily("eagle_full", (GroupShape("full", 16),), num_blocks=24, use_eagle=True),
    KVFamily("eagle_full_window", (GroupShape("full", 16), GroupShape("sliding_window", 16, 48)),
             num_blocks=40, use_eagle=True),
    # EAGLE under sparse retention: the window keeps the tails a block past EAGLE's replay
    # boundaries (a block below the resend's and the longer sibling's), and per segment.
    KVFamily("eagle_window_retention0",
             (GroupShape("full", 16), GroupShape("sliding_window", 16, 48)), num_blocks=40,
             use_eagle=True, retention_interval=0),
    KVFamily("eagle_window_retention64",
             (GroupShape("full", 16), GroupShape("sliding_window", 16, 48)), num_blocks=40,
             use_eagle=True, retention_interval=64),
    # Decode context parallelism: the scheduler's blocks span 2 (4) ranks' 16-token blocks,
    # hashes at that size; with EAGLE, the dropped block is the scaled one.
    KVFamily("full_dcp2", (GroupShape("full", 16),), num_blocks=24, dcp_world_size=2),
    KVFamily("full_dcp4", (GroupShape("full", 16),), num_blocks=16, dcp_world_size=4),
    KVFamily("eagle_full_dcp2", (GroupShape("full", 16),), num_blocks=24, use_eagle=True,
             dcp_world_size=2),
    # Beside mamba 'align' (replicated, 16-token states) the hash block stays 16 under
    # full-attention blocks of 32: hits may end inside a block, with copy-on-write.
    # Speculative decoding beside mamba: a state block per draft token (2 here), in 'none'
    # mode counted with every allocation, in 'align' mode moved to the table's end as the
    # state moves on.
    KVFamily("mamba_spec2", (GroupShape("full", 16), GroupShape("mamba", 16,
                                                                 speculative_blocks=2)),
             num_blocks=48),
    KVFamily("mamba_align_spec2",
             (GroupShape("full", 16),
              GroupShape("mamba", 16, mamba_cache_mode="align", speculative_blocks=2)),
             num_blocks=48),
    KVFamily("mamba_align_dcp2",
             (GroupShape("full", 16), GroupShape("mamba", 16, mamba_cache_mode="align")),
             num_blocks=40, dcp_world_size=2),
    # EAGLE beside mamba 'align' (also under DCP 2 with sparse retention): full attention drops
    # its last block (one hash block with sub-block hits, looking one past first), mamba never
    # drops and finds the state that matches the shorter hit; the prompt's keyed tail state
    # sits a unit below its end.
    KVFamily("eagle_mamba_align",
             (GroupShape("full", 16), GroupShape("mamba", 16, mamba_cache_mode="align")),
             num_blocks=40, use_eagle=True),
    KVFamily("eagle_mamba_align_dcp2",
             (GroupShape("full", 16), GroupShape("mamba", 16, mamba_cache_mode="align")),
             num_blocks=40, dcp_world_size=2, use_eagle=True, retention_interval=0),
    KVFamily("eagle_mamba_align_sub_block",
             (GroupShape("full", 16), GroupShape("mamba", 16, mamba_cache_mode="align")),
             num_blocks=40, hash_block_size=4, use_eagle=True),
    KVFamily("eagle_window_alignment",
             (GroupShape("full", 32), GroupShape("sliding_window", 16, 16)), num_blocks=40,
             use_eagle=True),
    # A circular buffer beside full attention and a window: one ring block per request, out
    # of the hit search, nothing indexed, freed with the request.
    KVFamily("full_circular_buffer", (GroupShape("full", 16), GroupShape("circular_buffer", 16),
                                      GroupShape("sliding_window", 16, 48)), num_blocks=48),
    # An encoder-decoder model (Whisper): cross-attention blocks sized by the encoder's output
    # at admission (0 to 100 tokens drawn), beside full attention and a window; no prefix cache.
    KVFamily("full_cross_attention", (GroupShape("full", 16), GroupShape("cross_attention", 16)),
             num_blocks=40, enable_caching=False),
    KVFamily("window_cross_attention", (GroupShape("sliding_window", 16, 32),
                                        GroupShape("cross_attention", 16)),
             num_blocks=40, enable_caching=False),
    KVFamily("full_replay_window", (GroupShape("full", 16),
                                    GroupShape("sliding_window", 16, 48, bounded_replay=True),
                                    GroupShape("sliding_window", 16, 48)), num_blocks=48),
)


def family_by_name(name: str) -> KVFamily:
    for family in FAMILIES:
        if family.name == name:
            return family
    raise ValueError(f"family: unknown KV family {name!r}")


def group_shape(config: EngineConfig, group: KVCacheGroup) -> GroupShape:
    """A workload group's shape: what both systems build its KV-cache spec from (the twin's
    adapter and upstream's read it alike, so the two cannot drift apart)."""
    window = group.sliding_window or group.attention_chunk_size or group.rswa_window or 0
    return GroupShape(group.type, config.block_size, window,
                      mamba_cache_mode=group.mamba_cache_mode or "none",
                      bounded_replay=group.bounded_replay,
                      # As vLLM's mamba layers: a state block per speculative token.
                      speculative_blocks=config.num_spec_tokens if group.type == "mamba" else 0)
