"""Hypothesis strategy for prefill/decode (P/D) workloads: the NIXL connector on (issue 31 §2).

A drawn workload from `strategies.workloads` on a layout the twin's NIXL connector models (full
attention, reference windows, sliding windows, whose exchanges keep the window's tail, and
chunked-local groups; a window alone included) gets the connector, and each plain request a
part in a P/D pair: none, the prefill side (half of them capped at one token, as a router
sends them), or the decode side, whose pull fails as a whole one time in five. Pull mode or
push mode (registrations the peer writes into), in pull mode half the time bidirectional
(decode sides keep their blocks for a read back; prefills read back a drawn number of a
decode side's tokens, failing one time in five, above or below a drawn recompute threshold),
pull and read latencies 0 to 3 steps, both failure policies, and in two draws of three a
MultiConnector with an OffloadingConnector asked first or second (a third of those give some
requests their own offload caps, `strategies.offload.draw_offload_limits`); half the draws cut
the GPU pool to just above the longest request, so pulls wait for blocks, held prefills crowd
the pool and requests are preempted mid-decode. Up to two operator resets of the prefix cache
and the connector's cache land while requests run (one beside an OffloadingConnector, whose
upstream crashes on two with no step between them).

Imported by tests only (it needs Hypothesis).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from conformance.sched.strategies.offload import (
    draw_connector_resets,
    draw_gpu_pool,
    draw_offload_limits,
    draw_resends,
)
from conformance.sched.strategies.workloads import workloads
from workloads.model import KVConnectorConfig, RequestSpec, Workload
from workloads.pd import KVTransferSpec


def pd_capable(workload: Workload) -> bool:
    """Layouts the twin's NIXL connector models (no ring or bounded-replay groups; mamba in
    'align' mode, hashed by the block or finer, which the OffloadingConnector a draw may put
    beside it also models), a generating model, no continuum policy (EAGLE drafters
    included)."""
    config = workload.config
    mamba = [g for g in config.kv_cache_groups if g.type == "mamba"]
    return (all(g.type in ("full", "reference_window", "sliding_window", "chunked_local",
                           "mamba") and not g.bounded_replay for g in config.kv_cache_groups)
            and all(g.mamba_cache_mode == "align" for g in mamba)
            and config.runner == "generate" and config.policy != "continuum"
            and config.decode_context_parallel_size == 1)


def _plain(request: RequestSpec) -> bool:
    """A request that may take a P/D part (`workloads.pd.check_kv_transfer`)."""
    return request.after is None and request.stream_end_step is None and not request.mm_items


def _with_part(draw: Any, request: RequestSpec, bidirectional: bool) -> RequestSpec:
    role = draw(st.sampled_from([None, "prefill", "decode"]), label="P/D role")
    if role is None or not _plain(request):
        return request
    if role == "prefill":
        router_capped = draw(st.booleans(), label="one-token prefill")
        readback = draw(st.one_of(st.none(), st.integers(1, request.prompt_len + 8)),
                        label="readback tokens") if bidirectional else None
        fails = readback is not None and draw(st.integers(0, 4), label="readback fails") == 0
        return replace(request, kv_transfer=KVTransferSpec("prefill", fails,
                                                           readback_tokens=readback),
                       max_tokens=1 if router_capped else request.max_tokens,
                       min_tokens=0 if router_capped else request.min_tokens)
    fails = draw(st.integers(0, 4), label="pull fails") == 0
    return replace(request, kv_transfer=KVTransferSpec("decode", fails))


@st.composite
def pd_workloads(draw: Any, max_requests: int = 10, mamba_align: bool = False) -> Workload:
    """`mamba_align`: mamba 'align' hybrids only (the prefill side leaves its prompt's last
    token to the decode side; a decode side's local hit may run past the mamba state, which
    the pull brings); half of them hashed finer than the block, with prompts sent again, so
    local hits end inside a block (sub-block hits, `impl.core.lagging_hits`)."""
    fine = mamba_align and draw(st.booleans(), label="finer hashes")
    workload: Workload = draw(workloads(max_requests, mamba_align=mamba_align and not fine,
                                        sub_block=fine).filter(pd_capable))
    if fine:
        workload = draw_resends(draw, workload)
    num_blocks = draw_gpu_pool(draw, workload)
    mode = draw(st.sampled_from(["pull", "push"]), label="transfer mode")
    bidirectional = mode == "pull" and draw(st.booleans(), label="bidirectional")
    connector = KVConnectorConfig(
        "nixl",
        transfer_mode=mode,
        bidirectional=bidirectional,
        recompute_threshold=draw(st.sampled_from([0, 16, 64]), label="recompute threshold"),
        load_failure_policy=draw(st.sampled_from(["fail", "recompute"]), label="policy"),
        load_latency_steps=draw(st.integers(0, 3), label="pull latency"),
        send_latency_steps=draw(st.integers(0, 3), label="read latency"),
    )
    tier = draw(st.sampled_from([None, "second", "first"]), label="CPU tier")
    if tier is not None:  # a MultiConnector: the OffloadingConnector beside the NIXL one
        cpu = KVConnectorConfig(
            "offloading", num_cpu_chunks=draw(st.sampled_from([4, 16, 64]), label="cpu chunks"),
            load_latency_steps=draw(st.integers(0, 3), label="cpu load latency"),
            store_latency_steps=draw(st.integers(0, 3), label="cpu store latency"),
            self_describing_kv_events=draw(st.booleans(), label="self-describing events"),
            sync_load_budget_bytes=draw(st.sampled_from([0, 1 << 20]),
                                        label="sync load budget"))
        connector = KVConnectorConfig("multi", connectors=(
            (cpu, connector) if tier == "first" else (connector, cpu)))
    requests = tuple(_with_part(draw, r, bidirectional) for r in workload.requests)
    if tier is not None:
        requests = draw_offload_limits(draw, requests)
    pd: Workload = replace(
        workload, name="hypothesis-pd", requests=requests,
        description="generated by conformance.sched.strategies.pd (NIXL P/D connector)",
        config=replace(workload.config, num_blocks=num_blocks, kv_connector=connector),
        # One reset at most beside an OffloadingConnector: two with no step between them (an
        # idle engine) crash upstream's (offloading-double-reset-assert.jsonl), which the
        # P/D family's short requests reach often.
        controls=tuple(sorted((*workload.controls, *draw_connector_resets(
            draw, workload, max_resets=1 if tier is not None else 2)),
                              key=lambda c: c.step)))
    return pd
