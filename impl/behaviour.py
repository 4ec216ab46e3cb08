"""`Behaviour`: what differs between the vLLM releases the twin follows, one switch each.

The twin is one code base that reproduces more than one upstream release. Where releases
disagree, the code asks a named field of `Behaviour` instead of comparing version strings, so
every difference is listed here once, with what it changes and where it was observed, and a
release is a preset of these fields (`behaviour_for`). A harness comparing the twin with a
release builds the twin with that release's preset (`vtwin conform --system impl --against
vllm==0.33.0` does it for you).

Each switch was found by differential probing (a workload where the two releases diverge) and
has a workload that fails when the switch is wrong; the field docs name it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class Behaviour:
    release: str
    """The upstream release whose behaviour this preset reproduces ("0.32.0", "0.33.0")."""

    cache_verified_blocks_on_output: bool
    """0.33: when a speculative-decoding request's output is applied (sync or async), the
    blocks its verified tokens filled are cached right away, up to its computed tokens minus
    those of steps still in flight; a stop that trims sampled tokens also takes them back from
    the computed count first. 0.32 caches only at the next `allocate_slots` (sync) or up to
    computed minus output placeholders (async). Seen on `spec-decode`: a full block is stored
    one step earlier."""

    priority_self_preemption_continues: bool
    """0.33: under the priority policy, a running request that has to preempt itself (it is
    the least important) no longer ends the running phase: the more important requests after
    it are still scheduled. 0.32 stops at it."""

    mamba_prefix_caching_requires_align: bool
    """0.33: prefix caching with a mamba group is refused unless the group's
    `mamba_cache_mode` is 'align' (the twin refuses the config as upstream does). 0.32 caches
    mamba states at every block boundary. Seen on `hybrid-mamba-none`: 0.33 raises when the
    scheduler is built."""

    mamba_align_skips_keyed_boundary: bool
    """0.33, mamba 'align': a cache call that lands on the prompt's last reusable boundary
    leaves that state alone when it is already keyed there (a prefix hit, or cached in an
    earlier step). 0.32 marks it cached *this step* again, so another request hitting it in
    that step is refused until the next (`impl.core.mamba_align`). Seen on
    `conformance/regressions/mamba-align-boundary-0.33.jsonl`."""

    local_prefill_interval: bool
    """0.33: `prefill_schedule_interval` > 1 holds prefill back in a single engine
    (`impl.sched.prefill_cadence`); 0.32 applies it only across data-parallel ranks, so a
    single engine ignores it."""

    lora_limit_counts_running: bool
    """0.33: admission keeps the adapters of *every* running request within `max_loras`; 0.32
    counts only the running requests scheduled in this step, so a running request left out of
    the step (budget) frees its adapter's slot for a waiting one."""

    offload_lookup_chunk_aligned: bool
    """0.33, CPU offload tier: the external lookup is skipped (no CPU hit) when the local hit
    does not end on an attention-chunk boundary of a chunked-local group, because the CPU
    lookup runs over the prompt's remaining hashes and their chunk boundaries must be the
    absolute ones. 0.32 looks up regardless. Seen on `hybrid-chunked-local` with offload."""

    unchunked_item_start_counts_as_before: bool
    """0.33, `disable_chunked_mm_input`: a chunk that starts exactly at a multimodal item and
    cannot cover all of it is cut to nothing (the request waits for a step with room for the
    whole item); 0.32 only cuts chunks that start before the item, so one starting at it
    splits the item. Seen on `multimodal-unchunked`."""

    encoder_blocked_admission_skips: bool
    """0.33: a waiting request whose chunk the encoder cuts to nothing (no budget or cache
    room for the item it reaches) is skipped for this step and admission goes on with the
    requests behind it; 0.32 stops admission there. Seen on `multimodal` (its final burst):
    the text request behind a blocked image request is admitted in the same step."""

    offload_lru_request_ranks: bool
    """0.33, the OffloadingConnector's LRU policy: chunks a running request inserts or first
    sees share one recency rank drawn for the request, ordered by token position (tails
    first), instead of a fresh rank each (`impl.connector.offloading.lru`). Seen on the
    offloading manager machine (`conformance/offloading`): a later store evicts a different
    chunk."""

    offload_failed_store_event: bool
    """0.33, the OffloadingConnector's CPU manager: a store that fails announces its chunks
    as a metadata-only removal event; 0.32 removes them silently. Seen on the offloading
    manager machine with events on."""

    offloading_lookup_restarts_stores: bool
    """0.33, the OffloadingConnector's scheduler side: a lookup (a request starting from
    token 0, first or after a preemption) moves the request's store cursor back to its first
    chunk, so a resumed request offers every chunk again; 0.32 keeps the cursor. Seen on
    `multimodal-unchunked` with `--offload offloading-arc`: a resumed request's chunk is
    stored again."""

    eagle_lookahead_block_hashes: bool
    """0.33, an EAGLE drafter with prefix caching and no KV connector: each block's hash also
    covers the token after the block (the drafter's KV at the block's last position reads it),
    so a block is hashed only once that token exists, and hits no longer give up their last
    block. 0.32 hashes the block alone and drops the last block of every hit
    (`impl.core.hit_search`). Seen on `eagle-multi-turn`: 0.33's hits are one block longer."""

    eagle_junction_block_below: bool
    """0.33, an EAGLE drafter whose hits give up their last block (with a KV connector, where
    0.33 keeps the block drop): under sparse retention the block below a shared prefix's
    junction is kept reachable too (a sibling that parts right after the junction cannot use
    the block past it, so its hit lands a block lower); 0.32 keeps the junction alone. Seen
    on `eagle-hybrid-sliding-window-retention0` with `--offload eager`: 0.33 caches one more
    window block before the junction."""

    encoder_budget_cut_without_lookahead: bool
    """0.33, a multimodal request with an EAGLE drafter (which reads one token past the chunk):
    a chunk cut because the encoder cannot take an item ends just before the item and is
    never made longer; 0.32 also keeps the drafter's token off the item there, and keeps an
    item's encoder-cache reference until the decoder is that token past it. Both choose items
    for the chunk plus the drafter's token. Seen on `eagle-multimodal`."""

    offloading_reset_fence: bool
    """0.33, the OffloadingConnector's scheduler side: a cache reset remembers the jobs it
    flushed (with the worker reports each still owes) and the engine keeps stepping until
    every one has been reported, though no request is left; 0.32 forgets them and an idle
    engine stops at once. Seen on the Hypothesis offloading family with connector resets: a
    reset while a finished request's store is in flight is followed by an empty step."""

    offloading_skips_chunks_with_holes: bool
    """0.33, the OffloadingConnector's stores: a chunk with a blank (null) block that could
    serve a hit is not offered (copying it would leave part of the chunk unwritten), e.g. a
    sliding window's chunk whose first block already fell out of the window; 0.32 offers it
    by its last block and copies the blocks it still has. Seen on the Hypothesis offloading
    family (a window of 33 tokens alone, chunks of two blocks)."""

    offloading_notes_every_allocation: bool
    """0.33, the OffloadingConnector's scheduler side: every allocation it hears of counts as
    blocks handed out (a finished request's store reading one of them is flushed), also one
    for which it loads nothing; 0.32 counts only its own loads' blocks and the scheduler's
    output. The same with the connector alone (the output lists every scheduled allocation);
    under a MultiConnector a NIXL decode request's blocks, allocated for its pull and not
    scheduled, flush a store in 0.33 only. Seen on the Hypothesis P/D family with a CPU tier
    asked second."""

    offloading_sync_loads: bool
    """0.33, the OffloadingConnector's `sync_load_budget_bytes`: a hit whose bytes still fit the
    step's budget is loaded within the step (the worker waits for it before the forward pass),
    so its request runs at once instead of waiting a step for its load; 0.32 has no such
    budget (the key is ignored) and every hit loads asynchronously
    (`impl.connector.offloading.sync_loads`)."""

    @property
    def switches(self) -> dict[str, bool]:
        """Every switch by name (for reports and `vtwin --version`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "release"}


BEHAVIOUR_0_32 = Behaviour(
    release="0.32.0",
    cache_verified_blocks_on_output=False,
    priority_self_preemption_continues=False,
    mamba_prefix_caching_requires_align=False,
    mamba_align_skips_keyed_boundary=False,
    local_prefill_interval=False,
    lora_limit_counts_running=False,
    offload_lookup_chunk_aligned=False,
    unchunked_item_start_counts_as_before=False,
    encoder_blocked_admission_skips=False,
    offload_lru_request_ranks=False,
    offload_failed_store_event=False,
    offloading_lookup_restarts_stores=False,
    encoder_budget_cut_without_lookahead=False,
    offloading_reset_fence=False,
    eagle_lookahead_block_hashes=False,
    eagle_junction_block_below=False,
    offloading_notes_every_allocation=False,
    offloading_skips_chunks_with_holes=False,
    offloading_sync_loads=False,
)
BEHAVIOUR_0_33 = Behaviour(
    release="0.33.0",
    cache_verified_blocks_on_output=True,
    priority_self_preemption_continues=True,
    mamba_prefix_caching_requires_align=True,
    mamba_align_skips_keyed_boundary=True,
    local_prefill_interval=True,
    lora_limit_counts_running=True,
    offload_lookup_chunk_aligned=True,
    unchunked_item_start_counts_as_before=True,
    encoder_blocked_admission_skips=True,
    offload_lru_request_ranks=True,
    offload_failed_store_event=True,
    offloading_lookup_restarts_stores=True,
    encoder_budget_cut_without_lookahead=True,
    offloading_reset_fence=True,
    eagle_lookahead_block_hashes=True,
    eagle_junction_block_below=True,
    offloading_notes_every_allocation=True,
    offloading_skips_chunks_with_holes=True,
    offloading_sync_loads=True,
)
DEFAULT_BEHAVIOUR = BEHAVIOUR_0_32
FOLLOWED_RELEASES: tuple[str, ...] = ("0.32.0", "0.33.0")


def behaviour_for(release: str) -> Behaviour:
    """The preset of a followed release; ValueError naming the followed ones otherwise."""
    for preset in (BEHAVIOUR_0_32, BEHAVIOUR_0_33):
        if preset.release == release:
            return preset
    raise ValueError(f"the twin follows vLLM {', '.join(FOLLOWED_RELEASES)}, not {release!r}")
