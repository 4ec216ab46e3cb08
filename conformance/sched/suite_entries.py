"""The suite's entries: each bundled workload or variant the gate runs, and what it covers.

A variant is a bundled workload with `dataclasses.replace` on its config (or, for aborts, on
its abort list), so it stays as small as the workload it comes from. `integrity_every` spaces
out the twin's integrity checks on the big replays, where a full-pool check every step would
dominate the run. `conformance.sched.suite` turns the entries into the suite and adds the
regression files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from conformance.sched import suite_builders
from workloads import KVCacheGroup, Workload, load
from workloads.multimodal import MultimodalConfig


@dataclass(frozen=True, slots=True)
class SuiteEntry:
    name: str
    covers: str
    make: Callable[[], Workload]
    integrity_every: int = 1


FULL_MAMBA_ALIGN = (KVCacheGroup("full"), KVCacheGroup("mamba", mamba_cache_mode="align"))
"""The hybrid full attention + mamba ('align') layout of the mamba variants."""


def _variant(base: str, name: str, description: str, **config: object) -> Callable[[], Workload]:
    """`base` with `config` replaced. Fewer draft tokens than the base's plans accept cap each
    planned acceptance at the new count (the runner accepts no more drafts than there are, so
    the run is the same), so the variant still writes a file the format reads back."""
    def make() -> Workload:
        workload = load(base)
        new_config = replace(workload.config, **config)  # type: ignore[arg-type]
        cap = new_config.num_spec_tokens
        plans = tuple(
            replace(plan, spec_acceptance=tuple(min(n, cap) for n in plan.spec_acceptance))
            if plan.spec_acceptance is not None and cap else plan
            for plan in workload.plans)
        return replace(workload, name=name, description=f"{workload.description}; {description}",
                       config=new_config, plans=plans)
    return make


def _bundled(name: str) -> Callable[[], Workload]:
    return lambda: load(name)


ENTRIES: tuple[SuiteEntry, ...] = (
    SuiteEntry("decode-heavy", "FCFS; EOS, stop tokens, max_tokens, min_tokens",
               _bundled("decode-heavy")),
    SuiteEntry("priority-mix", "priority policy with priority preemption",
               _bundled("priority-mix")),
    SuiteEntry("prefix-sharing", "prefix caching on, shared prefixes, cache salts",
               _bundled("prefix-sharing")),
    SuiteEntry("prefix-sharing-no-cache", "prefix caching off",
               _variant("prefix-sharing", "prefix-sharing-no-cache", "prefix caching off",
                        enable_prefix_caching=False)),
    SuiteEntry("long-context", "chunked prefill with a long-prefill threshold",
               _bundled("long-context")),
    SuiteEntry("long-context-adaptive", "chunked prefill with an adaptive long-prefill "
               "threshold: a 64-token cap floored at the 256-token budget's fair share among "
               "the queued and running requests (two or three of them get 128 or 85)",
               _variant("long-context", "long-context-adaptive", "threshold 64, adaptive",
                        long_prefill_token_threshold=64,
                        long_prefill_token_threshold_adaptive=True)),
    SuiteEntry("long-context-no-threshold", "chunked prefill without a threshold",
               _variant("long-context", "long-context-no-threshold", "no prefill threshold",
                        long_prefill_token_threshold=0)),
    SuiteEntry("decode-heavy-no-chunking", "chunked prefill off",
               _variant("decode-heavy", "decode-heavy-no-chunking", "chunked prefill off",
                        enable_chunked_prefill=False)),
    SuiteEntry("preemption-storm", "preemption storms (and two aborts)",
               _bundled("preemption-storm")),
    SuiteEntry("aborts-mid-prefill-decode", "aborts mid-prefill and mid-decode",
               suite_builders.aborts_mid_prefill_decode),
    SuiteEntry("repetition-detection", "requests finished when their output ends in a repeated "
               "pattern (repetition_detection: pattern sizes, counts, min_tokens holding it "
               "back), over a 16-token vocabulary so outputs repeat by chance",
               suite_builders.repetition_detection),
    SuiteEntry("spec-decode", "speculative decoding, sync", _bundled("spec-decode")),
    SuiteEntry("spec-decode-async", "speculative decoding under async scheduling",
               _variant("spec-decode", "spec-decode-async", "async scheduling",
                        async_scheduling=True)),
    SuiteEntry("spec-decode-chunked", "speculative decoding with prompts in several chunks: "
               "drafts offered mid-prefill are dropped, uniform padding beside prefills",
               _variant("spec-decode", "spec-decode-chunked", "32-token budget, threshold 24",
                        max_num_batched_tokens=32, long_prefill_token_threshold=24)),
    SuiteEntry("spec-decode-request-metrics", "speculative decoding with per-request metrics "
               "(per_request_spec_decode_metrics detailed): each finished request's histogram "
               "of accepted drafts, drafts proposed and per-step counts",
               _variant("spec-decode", "spec-decode-request-metrics", "per-request metrics",
                        per_request_spec_decode_metrics="detailed")),
    SuiteEntry("structured-output-request-metrics", "per-request spec-decode metrics (summary) "
               "with grammars under async scheduling: drafts the grammar rejected left out of "
               "the proposed count",
               _variant("structured-output", "structured-output-request-metrics",
                        "async scheduling, per-request metrics", async_scheduling=True,
                        per_request_spec_decode_metrics="summary")),
    SuiteEntry("spec-decode-stats-off", "speculative decoding with stats off (no prefix-cache, "
               "spec-decoding or scheduler stats kept or reported)",
               _variant("spec-decode", "spec-decode-stats-off", "stats off", log_stats=False)),
    SuiteEntry("bursty", "async scheduling with bursts and aborts", _bundled("bursty")),
    SuiteEntry("multi-turn", "multi-turn conversations reusing prefixes",
               _bundled("multi-turn")),
    SuiteEntry("agent-sessions", "agent sessions, xxhash", _bundled("agent-sessions")),
    SuiteEntry("hybrid-sliding-window", "hybrid full + sliding window",
               _bundled("hybrid-sliding-window")),
    SuiteEntry("hybrid-chunked-local", "hybrid full + chunked local attention",
               _variant("hybrid-sliding-window", "hybrid-chunked-local",
                        "groups full + chunked_local(128)",
                        kv_cache_groups=(KVCacheGroup("full"),
                                         KVCacheGroup("chunked_local", attention_chunk_size=128)))),
    SuiteEntry("hybrid-reference-window", "hybrid full + reference sliding window (R-SWA): "
               "each request keeps its prompt, and of its output only the last 24 tokens' "
               "blocks, so long outputs give blocks back as they decode",
               _variant("decode-heavy", "hybrid-reference-window",
                        "groups full + reference_window(24)",
                        kv_cache_groups=(KVCacheGroup("full"),
                                         KVCacheGroup("reference_window", rswa_window=24)))),
    SuiteEntry("hybrid-bounded-replay", "hybrid full + sliding window with bounded replay "
               "(DeepSeek-V4.1 style): the window keeps no prefix cache, a hit recomputes its "
               "last 400 tokens to rebuild it (the 608-token document's hits), a hit no longer "
               "than that is dropped (the 400-token document's)",
               _variant("hybrid-sliding-window", "hybrid-bounded-replay",
                        "groups full + sliding_window(400, bounded replay)",
                        kv_cache_groups=(KVCacheGroup("full"),
                                         KVCacheGroup("sliding_window", sliding_window=400,
                                                      bounded_replay=True)))),
    SuiteEntry("hybrid-circular-buffer", "hybrid full + a circular buffer (an indexer's ring: "
               "one block per request for its whole life, no prefix cache) under pool "
               "pressure and shared prefixes",
               _variant("hybrid-sliding-window", "hybrid-circular-buffer",
                        "groups full + circular_buffer",
                        kv_cache_groups=(KVCacheGroup("full"),
                                         KVCacheGroup("circular_buffer")))),
    SuiteEntry("eagle-multi-turn", "multi-turn conversations with an EAGLE drafter (3 "
               "tokens): every prefix hit gives up its last block",
               _variant("multi-turn", "eagle-multi-turn", "EAGLE, 3 draft tokens",
                        num_spec_tokens=3, num_lookahead_tokens=3, spec_method="eagle")),
    SuiteEntry("mtp-multi-turn", "multi-turn conversations with a chain of three MTP modules "
               "(3 draft tokens): no prompt chunk ends within 3 tokens of its prefill's end, the "
               "last 2 computed tokens are not indexed yet, every hit gives up its last block",
               _variant("multi-turn", "mtp-multi-turn", "MTP, 3 modules, 3 draft tokens",
                        num_spec_tokens=3, num_lookahead_tokens=3, spec_method="mtp",
                        mtp_modules=3, max_num_batched_tokens=40)),
    SuiteEntry("mtp-hybrid-mamba", "hybrid full + mamba ('align') with a chain of two MTP "
               "modules (2 draft tokens): chunks stop short of the prefill's end and at block "
               "boundaries; under 0.33 the hashes cover the 2 tokens past each block, so the "
               "last state a resend can use ends 2 tokens or more before the prompt's end",
               _variant("hybrid-sliding-window", "mtp-hybrid-mamba",
                        "groups full + mamba (align), MTP 2 modules",
                        kv_cache_groups=FULL_MAMBA_ALIGN, num_spec_tokens=2,
                        num_lookahead_tokens=2, spec_method="mtp", mtp_modules=2)),
    SuiteEntry("mtp-chain-mamba-retention0", "hybrid full + mamba ('align') with a chain of "
               "two MTP modules under sparse retention: under 0.33 the hashes cover the 2 "
               "tokens past each block, the replay boundary's state is never hashed, and the "
               "prompt's last hashed state is kept by the prompt-tail rule instead",
               _variant("hybrid-sliding-window", "mtp-chain-mamba-retention0",
                        "groups full + mamba (align), MTP 2 modules, sparse retention (0)",
                        kv_cache_groups=FULL_MAMBA_ALIGN, num_spec_tokens=2,
                        num_lookahead_tokens=2, spec_method="mtp", mtp_modules=2,
                        prefix_cache_retention_interval=0)),
    SuiteEntry("mamba-spec-decode", "hybrid full + mamba with speculative decoding (3 "
               "tokens): each request keeps a state block per draft token past its running "
               "state (prefix caching off, so both releases run it)",
               _variant("spec-decode", "mamba-spec-decode", "groups full + mamba, no caching",
                        kv_cache_groups=(KVCacheGroup("full"), KVCacheGroup("mamba")),
                        enable_prefix_caching=False, num_blocks=129)),
    SuiteEntry("mamba-align-spec-decode", "preemption storms on full + mamba ('align') with "
               "speculative decoding (2 tokens): the drafts' state blocks taken with the first "
               "state, moved to the table's end as the state moves on, the previous state "
               "freed by index",
               _variant("preemption-storm", "mamba-align-spec-decode",
                        "groups full + mamba (align), 2 draft tokens",
                        kv_cache_groups=FULL_MAMBA_ALIGN, num_spec_tokens=2, num_blocks=82)),
    SuiteEntry("mamba-align-spec-decode-chunked", "speculative decoding (2 tokens) on full + "
               "mamba ('align') with prompts in chunks of up to 64 tokens: a chunk moving the "
               "state several blocks on moves the drafts' state blocks it passes to the table's "
               "end instead of freeing them",
               _variant("spec-decode", "mamba-align-spec-decode-chunked",
                        "groups full + mamba (align), 2 draft tokens, 64-token budget",
                        kv_cache_groups=FULL_MAMBA_ALIGN, num_spec_tokens=2,
                        max_num_batched_tokens=64)),
    SuiteEntry("dcp-multi-turn", "multi-turn conversations under decode context parallelism "
               "(2 ranks): blocks and hashes span 32 tokens",
               _variant("multi-turn", "dcp-multi-turn", "DCP 2",
                        decode_context_parallel_size=2)),
    SuiteEntry("dcp-hybrid-mamba", "hybrid full + mamba ('align') under DCP (2 ranks): "
               "full attention's blocks span 32 tokens, mamba's 16, hashes at 16 (hits inside "
               "a block, copy-on-write)",
               _variant("hybrid-sliding-window", "dcp-hybrid-mamba",
                        "groups full + mamba (align), DCP 2", kv_cache_groups=FULL_MAMBA_ALIGN,
                        decode_context_parallel_size=2)),
    SuiteEntry("dcp-eagle-preemption-storm", "preemption storms under DCP (4 ranks: 64-token "
               "blocks, 9 of them) with an EAGLE drafter (2 tokens)",
               _variant("preemption-storm", "dcp-eagle-preemption-storm", "DCP 4, EAGLE 2",
                        decode_context_parallel_size=4, num_blocks=10, num_spec_tokens=2,
                        num_lookahead_tokens=2, spec_method="eagle")),
    SuiteEntry("eagle-multimodal", "multimodal items with an EAGLE drafter (2 tokens): items "
               "chosen for the chunk plus the token the drafter reads past it, cuts before an "
               "item the encoder cannot take (0.32 keeps the drafter's token off it too)",
               _variant("multimodal", "eagle-multimodal", "EAGLE, 2 draft tokens",
                        num_spec_tokens=2, num_lookahead_tokens=2, spec_method="eagle")),
    SuiteEntry("eagle-hybrid-sliding-window", "hybrid full + sliding window with an EAGLE "
               "drafter (2 tokens): the window's hit needs one more block, which it drops",
               _variant("hybrid-sliding-window", "eagle-hybrid-sliding-window",
                        "EAGLE, 2 draft tokens", num_spec_tokens=2, num_lookahead_tokens=2,
                        spec_method="eagle")),
    SuiteEntry("eagle-hybrid-sliding-window-retention0", "hybrid full + sliding window with "
               "an EAGLE drafter under vLLM's default sparse retention: the window keeps the "
               "tails one block past EAGLE's replay boundaries (a block below the resend's and "
               "the longer sibling's), which its hits match and give back",
               _variant("hybrid-sliding-window", "eagle-hybrid-sliding-window-retention0",
                        "EAGLE, 2 draft tokens, sparse retention (0)", num_spec_tokens=2,
                        num_lookahead_tokens=2, spec_method="eagle",
                        prefix_cache_retention_interval=0)),
    SuiteEntry("eagle-hybrid-mamba", "hybrid full + mamba ('align') with an EAGLE drafter (2 "
               "tokens): a prompt's chunk stops a block below its last block boundary, where "
               "the state a later hit needs ends (full attention's hit gives up its last "
               "block; mamba finds the state at the shorter length)",
               _variant("hybrid-sliding-window", "eagle-hybrid-mamba",
                        "groups full + mamba (align), EAGLE 2", kv_cache_groups=FULL_MAMBA_ALIGN,
                        num_spec_tokens=2, num_lookahead_tokens=2, spec_method="eagle")),
    SuiteEntry("eagle-hybrid-mamba-retention0", "hybrid full + mamba ('align') with an EAGLE "
               "drafter under sparse retention: the states kept are those at EAGLE's replay "
               "boundaries, a block below the resend's and the longer sibling's",
               _variant("hybrid-sliding-window", "eagle-hybrid-mamba-retention0",
                        "groups full + mamba (align), EAGLE 2, sparse retention (0)",
                        kv_cache_groups=FULL_MAMBA_ALIGN, num_spec_tokens=2,
                        num_lookahead_tokens=2, spec_method="eagle",
                        prefix_cache_retention_interval=0)),
    SuiteEntry("eagle-mamba-preemption", "preemption storms on full + mamba ('align') with an "
               "EAGLE drafter (2 tokens): the drafts' state blocks, resumed requests replaying "
               "their output as prefill stop a block below their last boundary",
               _variant("preemption-storm", "eagle-mamba-preemption",
                        "groups full + mamba (align), EAGLE 2",
                        kv_cache_groups=FULL_MAMBA_ALIGN, num_blocks=82,
                        num_spec_tokens=2, num_lookahead_tokens=2, spec_method="eagle")),
    SuiteEntry("eagle-mamba-sub-block", "multi-turn conversations on full + mamba ('align') "
               "hashed every 4 tokens with an EAGLE drafter (3 tokens): full attention's hit "
               "looks one hash block past and gives it up, the prompt's tail state is keyed a "
               "hash block below its end (whole, when sparse retention left its block unkeyed)",
               _variant("multi-turn", "eagle-mamba-sub-block",
                        "groups full + mamba (align), 4-token hashes, EAGLE 3",
                        kv_cache_groups=FULL_MAMBA_ALIGN, hash_block_size=4,
                        num_spec_tokens=3, num_lookahead_tokens=3, spec_method="eagle")),
    SuiteEntry("eagle-mamba-junction", "shared prefixes on full + mamba ('align') hashed every "
               "4 tokens with an EAGLE drafter (3 tokens) and the engine's "
               "enable_mamba_shared_prefix_checkpoint: a sibling's chunk ends exactly at the "
               "junction where full attention's hit ran past mamba's, inside a block, and the "
               "state there is keyed (and copied before the next chunk overwrites it)",
               _variant("prefix-sharing", "eagle-mamba-junction",
                        "groups full + mamba (align), 4-token hashes, EAGLE 3, junction states",
                        kv_cache_groups=FULL_MAMBA_ALIGN, hash_block_size=4,
                        num_spec_tokens=3, num_lookahead_tokens=3, spec_method="eagle",
                        enable_mamba_shared_prefix_checkpoint=True)),
    SuiteEntry("hybrid-mamba", "hybrid full + mamba, cache mode 'align' (block-aligned chunks)",
               _variant("hybrid-sliding-window", "hybrid-mamba", "groups full + mamba (align)",
                        kv_cache_groups=FULL_MAMBA_ALIGN)),
    SuiteEntry("hybrid-sliding-window-retention0", "hybrid full + sliding window under vLLM's "
               "default sparse retention (prefix_cache_retention_interval 0): the window caches "
               "only the tails before a prompt's replay boundary and before the junction where "
               "a request parts from a cached prefix; with the OffloadingConnector its stores "
               "keep the same tails",
               _variant("hybrid-sliding-window", "hybrid-sliding-window-retention0",
                        "sparse retention (0)", prefix_cache_retention_interval=0)),
    SuiteEntry("hybrid-mamba-retention0", "hybrid full + mamba (align) under sparse retention: "
               "one state kept per reachable boundary (the replay's, a shared prefix's junction)",
               _variant("hybrid-sliding-window", "hybrid-mamba-retention0",
                        "groups full + mamba (align), sparse retention (0)",
                        kv_cache_groups=FULL_MAMBA_ALIGN,
                        prefix_cache_retention_interval=0)),
    SuiteEntry("hybrid-sliding-window-hash-block-8", "hybrid full + sliding window hashed "
               "every 8 tokens under 16-token blocks (prompt-tail entries inside blocks; hits "
               "stay on the block grid); with every --offload mode, the connectors key their "
               "CPU copies by the finer hashes",
               _variant("hybrid-sliding-window", "hybrid-sliding-window-hash-block-8",
                        "8-token hashes", hash_block_size=8)),
    SuiteEntry("hybrid-sliding-window-retention256", "hybrid full + sliding window (128) "
               "under a retention interval of 256 tokens: the window caches the tails that end "
               "each 256-token segment plus the tails before a prompt's replay boundary and a "
               "shared prefix's junction",
               _variant("hybrid-sliding-window", "hybrid-sliding-window-retention256",
                        "retention interval 256", prefix_cache_retention_interval=256)),
    SuiteEntry("hybrid-mamba-retention64", "hybrid full + mamba (align) under a retention "
               "interval of 64 tokens: one state kept per 64-token segment, plus the states at "
               "the reachable boundaries",
               _variant("hybrid-sliding-window", "hybrid-mamba-retention64",
                        "groups full + mamba (align), retention interval 64",
                        kv_cache_groups=FULL_MAMBA_ALIGN,
                        prefix_cache_retention_interval=64)),
    SuiteEntry("hybrid-mamba-sub-block", "multi-turn conversations on a hybrid full + mamba "
               "(align) model hashed every 4 tokens under 16-token blocks: a turn resends the "
               "last one, so its hit ends inside a block and it copies the shared blocks it "
               "will write into; a running request copies its prompt-tail state before "
               "overwriting it",
               _variant("multi-turn", "hybrid-mamba-sub-block",
                        "groups full + mamba (align), 4-token hashes",
                        kv_cache_groups=FULL_MAMBA_ALIGN,
                        hash_block_size=4)),
    SuiteEntry("hybrid-mamba-none", "hybrid full + mamba, cache mode 'none' (0.32 caches every "
               "block boundary; 0.33 refuses it with prefix caching)",
               _variant("hybrid-sliding-window", "hybrid-mamba-none", "groups full + mamba",
                        kv_cache_groups=(KVCacheGroup("full"), KVCacheGroup("mamba")))),
    SuiteEntry("offload-sessions", "sessions coming back from the CPU offload tier (eager)",
               _bundled("offload-sessions")),
    SuiteEntry("offload-sessions-lazy", "sessions coming back from the CPU tier (lazy offload)",
               _bundled("offload-sessions-lazy")),
    SuiteEntry("multimodal", "multimodal items: encoder budget, shared encoder cache with "
               "evictions, items as block-hash keys, a reused id finished with an error",
               _bundled("multimodal")),
    SuiteEntry("multimodal-hits", "multimodal at seed 4 under the priority policy: prefix hits "
               "that end inside an image whose encoder output is gone (no budget left: the chunk "
               "gets nothing), a reused image id", suite_builders.multimodal_hits),
    SuiteEntry("multimodal-iteration-details", "multimodal with per-iteration details logged "
               "(enable_logging_iteration_details): each step's encoder inputs and their "
               "embeddings counted in the scheduler output",
               _variant("multimodal", "multimodal-iteration-details",
                        "per-iteration details logged", log_iteration_details=True)),
    SuiteEntry("encoder-decoder", "Whisper-style encoder-decoder: audio encoded on the first "
               "step into cross-attention blocks, the encoder budget admitting a burst a few at a "
               "time, preemptions that encode again, upstream's growing encoder room",
               _bundled("encoder-decoder")),
    SuiteEntry("encoder-decoder-window", "encoder-decoder with a sliding-window decoder under "
               "the priority policy", _bundled("encoder-decoder-window")),
    SuiteEntry("multimodal-largest-item", "multimodal with the model's largest item (160 "
               "tokens) named: the engine raises the encoder budget of 120 to it at start-up, "
               "so the final burst's two images are encoded in one step",
               _variant("multimodal", "multimodal-largest-item", "largest item 160 tokens",
                        multimodal=MultimodalConfig(120, 200, False, 160))),
    SuiteEntry("multimodal-modalities-disabled", "a multimodal model serving text only (every "
               "modality disabled, vLLM's limit_mm_per_prompt 0): the engine starts no encoder, "
               "budget and cache 0, the multimodal workload's prompts without their items",
               suite_builders.modalities_disabled),
    SuiteEntry("multimodal-unsplittable-item", "multimodal-unchunked whose model's largest item "
               "(120 tokens) exceeds a step's 100: chunks may not split it, so the engine "
               "refuses to start (both systems refuse alike)",
               _variant("multimodal-unchunked", "multimodal-unsplittable-item",
                        "largest item 120 tokens, unsplittable",
                        multimodal=MultimodalConfig(120, 200, True, 120))),
    SuiteEntry("multimodal-unchunked", "multimodal with disable_chunked_mm_input (chunks stop "
               "before an item they cannot cover)", _bundled("multimodal-unchunked")),
    SuiteEntry("streaming-sessions", "streaming-input sessions: turns, parts queued or awaited "
               "with seats and blocks held, closes while running or waiting",
               _bundled("streaming-sessions")),
    SuiteEntry("structured-output", "structured output with spec decode: grammars compiling "
               "for many steps or failing (errors), drafts trimmed at the first rejected "
               "token, the grammar bitmask's rows", _bundled("structured-output")),
    SuiteEntry("structured-output-async", "structured output under async scheduling: steps "
               "whose grammar requests have a step in flight wait for its output (drafts "
               "trimmed and padded in the deferred output, bitmask rows of requests that "
               "finished meanwhile dropped, invalid drafts left out of the stats)",
               _variant("structured-output", "structured-output-async", "async scheduling",
                        async_scheduling=True)),
    SuiteEntry("pooling", "a pooling model: prefill-only requests finished by pooled output "
               "(no token), whole-context prompts, prefix hits, chunks and preemptions",
               _bundled("pooling")),
    SuiteEntry("operator-controls", "operator controls between steps: prefix-cache resets "
               "(refused, forced, idle), pauses of new and of all requests",
               _bundled("operator-controls")),
    SuiteEntry("pd-disaggregation", "the NIXL prefill/decode connector on one instance: "
               "decode requests pulling their prompt past a local hit, a pull failing (an "
               "error), prefills holding their blocks for the peer's read and handing on what "
               "to read, aborts before, during and instead of a pull, preemptions by held "
               "prefills", _bundled("pd-disaggregation")),
    SuiteEntry("pd-disaggregation-recompute", "the P/D connector with a failed pull "
               "recomputed locally (load_failure_policy 'recompute')",
               _bundled("pd-disaggregation-recompute")),
    SuiteEntry("pd-disaggregation-push", "the P/D connector in push mode: decode requests "
               "registering the blocks the peer writes (once, none after a preemption; an "
               "empty order for one aborted before it registered), the write failing as a "
               "whole, prefills handing the worker the blocks to write and holding them "
               "until written", _bundled("pd-disaggregation-push")),
    SuiteEntry("pd-readback", "turn-2 readback (bidirectional NIXL): decode sides keeping their "
               "blocks for a read back, second turns pulling the decode side's tokens past "
               "their local hit or recomputing them under the threshold, a readback failing",
               _bundled("pd-readback")),
    SuiteEntry("pd-offloading", "a MultiConnector: the NIXL connector asked first, the "
               "OffloadingConnector beside it (plain and prefill requests hit the CPU tier, "
               "decode requests pull), both connectors' orders compared every step",
               _bundled("pd-offloading")),
    SuiteEntry("pd-offloading-cpu-first", "the MultiConnector with the CPU tier asked first: "
               "a decode request whose prompt the CPU tier holds loads it from there and "
               "pulls nothing (an empty order releases the peer)",
               _bundled("pd-offloading-cpu-first")),
    SuiteEntry("pd-pair", "a prefill and a decode instance behind the harness's router, each "
               "compared step by step: prefills held until the decode side has pulled them, "
               "a small decode pool backing the prefill side up into preemption, a failing "
               "transfer, aborts while prefilling, while held and while decoding",
               _bundled("pd-pair")),
    SuiteEntry("pd-pair-hybrid", "the P/D pair on a hybrid model (full attention + a "
               "sliding window): pulls carry the window's tail, a failed transfer is reported "
               "by request", suite_builders.pd_pair_hybrid),
    SuiteEntry("pd-pair-push", "the P/D pair with the connector in push mode (the decode "
               "side registers, the prefill side writes)", _bundled("pd-pair-push")),
    SuiteEntry("offloading-resets", "the OffloadingConnector reset by an operator with the "
               "prefix cache (reset_connector): chunks forgotten, jobs in flight flushed and "
               "their late reports ignored, requests offering their chunks again",
               lambda: suite_builders.connector_resets("offloading", "offloading-resets")),
    # Step 54: a load and a store issued in step 53 are in flight (the tier refuses, both are
    # abandoned and land in that step); step 125: nothing in flight, the CPU pool is emptied
    # (checked on the run's trace).
    SuiteEntry("offload-resets", "the CPU offload tier (eager) reset by an operator with the "
               "prefix cache while a load and a store are in flight: both abandoned (their "
               "completions only drop pins), the CPU pool kept until they land, running "
               "requests storing nothing more", lambda: suite_builders.connector_resets(
                   "eager", "offload-resets", steps=(54, 125))),
    SuiteEntry("offloading-limits", "requests' own caps on the OffloadingConnector "
               "(max_load_tokens, max_offload_tokens; ARC, chunks of a block) beside a sliding "
               "window: loads cut short of the CPU tier's hit and to whole chunks, stores "
               "stopping early or never made",
               lambda: suite_builders.offloading_limits(
                   (KVCacheGroup("full"), KVCacheGroup("sliding_window", sliding_window=128)),
                   "offloading-limits", blocks_per_chunk=1)),
    SuiteEntry("offloading-limits-mamba", "the same caps beside mamba ('align'), chunks of two "
               "blocks, every chunk stored (not the prompt's alone): a state past the offload "
               "cap is not stored", lambda: suite_builders.offloading_limits(
                   FULL_MAMBA_ALIGN, "offloading-limits-mamba", blocks_per_chunk=2,
                   prompt_only=False)),
    SuiteEntry("offloading-mamba-partial-tails", "mamba ('align') hashed every 4 tokens "
               "beside the OffloadingConnector (chunks of a block): a prompt's last state "
               "inside a block stored from its copy-on-write, loaded past the whole chunks of "
               "a resend, and a CPU hit longer than the GPU's sub-block tail loaded instead of "
               "copying it", lambda: suite_builders.offloading_partial_tails(FULL_MAMBA_ALIGN)),
    SuiteEntry("mooncake", "Mooncake replay, first 100 rows", _bundled("mooncake"),
               integrity_every=50),
    SuiteEntry("azure", "Azure conversation replay, first 200 rows", _bundled("azure"),
               integrity_every=50),
)
