"""Generated workloads, both systems in lockstep: the twin must match upstream exactly.

The space (`conformance.sched.strategies.workloads`) spans what users configure: hybrid layouts up
to three attention types, windows off the block grid, hybrid hash blocks, budgets and context
lengths at their edges, priority preemption, spec decode with padding and lookahead, async
scheduling, multi-turn sessions. Hypothesis is steered (`target`) toward runs that preempt,
evict cached blocks, pad spec-decode batches and hit the prefix cache, where bugs live.

Examples per run come from the Hypothesis profile (conformance/tests/conftest.py: `default`
for CI, random with a printed seed; `nightly`; `quick`). A failure shrinks to a small workload,
is written under `.hypothesis/regressions/` as a standalone file (move it to
`conformance/regressions/` with its fix), and prints the workload and first divergence.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, note, target

from conformance.sched.activity import Activity
from conformance.sched.lockstep import LockstepResult, run_lockstep
from conformance.sched.pd_pair import run_instances
from conformance.sched.strategies.controls import control_workloads
from conformance.sched.strategies.encoder_decoder import encoder_decoder_workloads
from conformance.sched.strategies.grammar import grammar_workloads
from conformance.sched.strategies.multimodal import multimodal_workloads
from conformance.sched.strategies.offload import offload_workloads, offloading_workloads
from conformance.sched.strategies.pd import pd_workloads
from conformance.sched.strategies.pd_pair import pd_pair_workloads
from conformance.sched.strategies.pooling import pooling_workloads
from conformance.sched.strategies.repetition import repetition_workloads
from conformance.sched.strategies.streaming import streaming_workloads
from conformance.sched.strategies.workloads import workloads
from conformance.sched.suite import write_regression
from conformance.tests.reference import Pair
from vtwin.errors import UserError
from workloads import dumps, loads
from workloads.model import Workload

pytestmark = pytest.mark.oracle
REGRESSIONS = Path(".hypothesis") / "regressions"


@given(workloads())
def test_generated_workloads_match_upstream_exactly(pair: Pair, workload: Workload) -> None:
    result = run_lockstep(workload, pair.twin, pair.reference)
    note(dumps(workload))
    activity = result.activity
    target(float(activity.preemptions), label="preemptions")
    target(float(activity.evictions), label="evictions")
    target(float(activity.padded_requests), label="spec-decode padding")
    target(float(min(activity.prefix_hit_tokens, 512)), label="prefix hits")
    _assert_exact(workload, result)


@given(workloads(dcp=True))
def test_generated_dcp_workloads_match_upstream_exactly(pair: Pair, workload: Workload) -> None:
    """Decode context parallelism: every block spans 2 or 4 ranks' tokens."""
    result = run_lockstep(workload, pair.twin, pair.reference)
    note(dumps(workload))
    target(float(result.activity.preemptions), label="preemptions")
    target(float(min(result.activity.prefix_hit_tokens, 512)), label="prefix hits")
    _assert_exact(workload, result)


@given(workloads(sub_block=True))
def test_generated_sub_block_workloads_match_upstream_exactly(pair: Pair,
                                                              workload: Workload) -> None:
    """Mamba 'align' hybrids hashed finer than the block: hits ending inside a block and the
    copy-on-write of their shared block or of a running request's prompt-tail state."""
    _steered_exact(pair, workload, lambda a: {
        "copies": a.block_copies, "prefix hits": min(a.prefix_hit_tokens, 512),
        "evictions": a.evictions, "preemptions": a.preemptions})


@given(offload_workloads())
def test_generated_offload_workloads_match_upstream_exactly(pair: Pair,
                                                            workload: Workload) -> None:
    """The CPU offload tier on (`strategies_offload`): steered toward loads from the CPU and
    external hits, besides the preemptions and evictions above."""
    result = run_lockstep(workload, pair.twin, pair.reference, integrity_every=1)
    note(dumps(workload))
    activity = result.activity
    target(float(activity.loads), label="loads")
    target(float(min(activity.external_hit_tokens, 512)), label="external hits")
    target(float(activity.preemptions), label="preemptions")
    _assert_exact(workload, result)


@given(offloading_workloads())
def test_generated_offloading_workloads_match_upstream_exactly(pair: Pair,
                                                               workload: Workload) -> None:
    """Upstream's OffloadingConnector on (`strategies.offload.offloading_workloads`): steered
    toward loads from the CPU, external hits, preemptions (which flush stores) and, under
    0.33, loads finished within their step (the sync-load budget)."""
    _steered_exact(pair, workload, lambda a: {
        "loads": a.loads, "external hits": min(a.external_hit_tokens, 512),
        "preemptions": a.preemptions, "sync loads": a.sync_loads})


@given(offload_workloads(mamba_align=True))
def test_generated_mamba_offload_workloads_match_upstream_exactly(pair: Pair,
                                                                  workload: Workload) -> None:
    """The CPU tier beside mamba 'align' groups: eager mode stores each state the cache keys
    by its block, never from the table by position (`strategies.offload`)."""
    _steered_exact(pair, workload, lambda a: {
        "loads": a.loads, "external hits": min(a.external_hit_tokens, 512),
        "preemptions": a.preemptions})


@given(offloading_workloads(mamba_align=True))
def test_generated_mamba_offloading_workloads_match_upstream_exactly(
        pair: Pair, workload: Workload) -> None:
    """The OffloadingConnector beside mamba 'align' groups: each state the cache keys is
    stored by block, hits end on a mamba chunk and load one state (`strategies.offload`)."""
    _steered_exact(pair, workload, lambda a: {
        "loads": a.loads, "external hits": min(a.external_hit_tokens, 512),
        "preemptions": a.preemptions, "sync loads": a.sync_loads})


@given(pd_workloads())
def test_generated_pd_workloads_match_upstream_exactly(pair: Pair, workload: Workload) -> None:
    """The NIXL P/D connector on (`strategies.pd`): steered toward pulls, reads of held
    prefills and preemptions (tight pools with blocks held for a peer)."""
    _steered_exact(pair, workload, lambda a: {
        "pulls": a.loads, "reads": a.stores, "preemptions": a.preemptions})


@given(pd_workloads(mamba_align=True))
def test_generated_mamba_pd_workloads_match_upstream_exactly(pair: Pair,
                                                             workload: Workload) -> None:
    """The NIXL P/D connector beside mamba 'align' groups (`strategies.pd`): prefills leave
    their prompt's last token to the decode side, decode sides' local hits run past a lagging
    mamba state only when a pull brings it."""
    _steered_exact(pair, workload, lambda a: {
        "pulls": a.loads, "reads": a.stores, "preemptions": a.preemptions})


@given(pd_pair_workloads())
def test_generated_pd_pair_workloads_match_upstream_exactly(pair: Pair,
                                                            workload: Workload) -> None:
    """P/D pairs (`strategies.pd_pair`): both instances behind the router, each compared
    step by step; the format accepts every drawn pair; steered toward transfers, preemptions
    on either instance and held prefills."""
    loads(dumps(workload), source=workload.name)
    prefill, decode = run_instances(workload, pair.twin, pair.reference, integrity_every=1)
    note(dumps(workload))
    target(float(decode.activity.loads), label="transfers")
    target(float(prefill.activity.preemptions + decode.activity.preemptions),
           label="preemptions")
    target(float(prefill.activity.stores), label="held prefills")
    for result in (prefill, decode):
        _assert_exact(workload, result)


@given(multimodal_workloads())
def test_generated_multimodal_workloads_match_upstream_exactly(pair: Pair,
                                                              workload: Workload) -> None:
    """Multimodal items in the prompts (`strategies.multimodal`): steered toward encoder work,
    encoder-cache evictions and preemptions (which give encoder references back)."""
    _steered_exact(pair, workload, lambda a: {
        "encoded items": a.encoded_items, "encoder evictions": a.encoder_evictions,
        "preemptions": a.preemptions})


@given(encoder_decoder_workloads())
def test_generated_encoder_decoder_workloads_match_upstream_exactly(
        pair: Pair, workload: Workload) -> None:
    """Encoder-decoder models (`strategies.encoder_decoder`): the format accepts every drawn
    workload; steered toward encoded inputs and preemptions (which encode again)."""
    loads(dumps(workload), source=workload.name)
    _steered_exact(pair, workload, lambda a: {
        "encoded items": a.encoded_items, "preemptions": a.preemptions})


@given(control_workloads())
def test_generated_control_workloads_match_upstream_exactly(pair: Pair,
                                                            workload: Workload) -> None:
    """Operator controls between steps (`strategies.controls`): resets and pauses at any
    step, steered toward preemptions (a forced reset preempts everything) and prefix hits
    (what a reset takes away)."""
    result = run_lockstep(workload, pair.twin, pair.reference, integrity_every=1)
    note(dumps(workload))
    activity = result.activity
    target(float(activity.preemptions), label="preemptions")
    target(float(min(activity.prefix_hit_tokens, 512)), label="prefix hits")
    _assert_exact(workload, result)


@given(streaming_workloads())
def test_generated_streaming_workloads_match_upstream_exactly(pair: Pair,
                                                              workload: Workload) -> None:
    """Streaming-input sessions (`strategies.streaming`): steered toward preemptions (a
    session waiting for input holds blocks others need) and prefix hits."""
    result = run_lockstep(workload, pair.twin, pair.reference, integrity_every=1)
    note(dumps(workload))
    activity = result.activity
    target(float(activity.preemptions), label="preemptions")
    target(float(min(activity.prefix_hit_tokens, 512)), label="prefix hits")
    _assert_exact(workload, result)


@given(grammar_workloads())
def test_generated_grammar_workloads_match_upstream_exactly(pair: Pair,
                                                            workload: Workload) -> None:
    """Structured output (`strategies.grammar`): grammars compiling for a few steps or failing,
    ranges that trim drafts; steered toward masked decodes, compile errors and preemptions."""
    result = run_lockstep(workload, pair.twin, pair.reference, integrity_every=1)
    note(dumps(workload))
    activity = result.activity
    target(float(activity.masked_rows), label="masked rows")
    target(float(activity.errors), label="errors")
    target(float(activity.preemptions), label="preemptions")
    _assert_exact(workload, result)


@given(pooling_workloads())
def test_generated_pooling_workloads_match_upstream_exactly(pair: Pair,
                                                            workload: Workload) -> None:
    """A pooling model (`strategies.pooling`): prefill-only requests, steered toward
    preemptions (of prompts mid-prefill) and prefix hits."""
    result = run_lockstep(workload, pair.twin, pair.reference, integrity_every=1)
    note(dumps(workload))
    activity = result.activity
    target(float(activity.preemptions), label="preemptions")
    target(float(min(activity.prefix_hit_tokens, 512)), label="prefix hits")
    _assert_exact(workload, result)


@given(repetition_workloads())
def test_generated_repetition_workloads_match_upstream_exactly(pair: Pair,
                                                               workload: Workload) -> None:
    """Repetition detection over an 8-token vocabulary: requests finish when their output
    ends in a repeated pattern, once min_tokens are out."""
    _steered_exact(pair, workload, lambda a: {"repetitions": a.repetitions,
                                              "preemptions": a.preemptions})


def _steered_exact(pair: Pair, workload: Workload,
                   targets: Callable[[Activity], dict[str, float]]) -> None:
    """Run `workload` in lockstep with integrity after every step, steer Hypothesis toward
    the activity `targets` names (label -> value), and require `exact`."""
    result = run_lockstep(workload, pair.twin, pair.reference, integrity_every=1)
    note(dumps(workload))
    for label, value in targets(result.activity).items():
        target(float(value), label=label)
    _assert_exact(workload, result)


def _assert_exact(workload: Workload, result: LockstepResult) -> None:
    """Fail on an error or a divergence at `exact`, after writing the workload as a standalone
    regression file (shrunk by then) for `conformance/regressions/`."""
    divergence = result.divergence_at("exact")
    if result.error is not None or divergence is not None:
        try:
            path = write_regression(workload, divergence or result.error or "", REGRESSIONS)
            note(f"regression file: {path}")
        except UserError as err:
            note(f"no regression file: {err}")
    assert result.error is None, f"{result.error}\n{result.error_detail}"
    # One side refusing a config the other runs compares nothing: a finding, not a pass.
    assert result.unbuilt is None, result.unbuilt
    assert divergence is None, (
        f"{divergence.summary()}; requests {', '.join(divergence.requests)}; "
        f"level reached: {result.level_reached or 'none'}")
