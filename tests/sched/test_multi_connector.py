"""The MultiConnector's scheduler side (`impl.connector.multi`): the first connector that
claims a request's tokens loads them and the others hear of its blocks with none; a connector
still looking stops the asking; finishing asks every connector; resets reach all; and, in a
scheduler with the NIXL connector and the OffloadingConnector, a decode request pulls while
its prompt's blocks are offered to the CPU tier."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from impl.behaviour import BEHAVIOUR_0_32, BEHAVIOUR_0_33, Behaviour
from impl.connector.multi import MultiConnectorScheduler
from impl.connector.multi_metadata import MultiMetadata
from impl.connector.nixl_metadata import NixlMetadata, PullOrder
from impl.connector.offloading.jobs import OffloadingMetadata
from impl.connector.types import (
    FinishedTransfer,
    KVConnectorOutput,
    MultiSettings,
    NixlSettings,
    OffloadingSettings,
)
from tests.sched.helpers import make_request, make_scheduler
from tests.sched.test_nixl_connector import BLOCK, decode


@dataclass
class Fake:
    """A connector that claims `claim` tokens and records what it is told."""

    claim: int | None = 0
    delay: bool = False
    params: FinishedTransfer | None = None
    resets: bool | None = None
    group_block_sizes: list[int] = field(default_factory=lambda: [BLOCK])
    completes_lagging_groups: bool = False
    asked: int = 0
    allocations: list[tuple[str, int]] = field(default_factory=list)
    outputs: int = 0

    def on_new_request(self, request: Any) -> None: ...

    def get_num_new_matched_tokens(self, request: Any, num_computed: int
                                   ) -> tuple[int | None, bool]:
        self.asked += 1
        return self.claim, bool(self.claim)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external: int) -> None:
        self.allocations.append((request.request_id, num_external))

    def build_connector_meta(self, output: Any) -> str:
        return f"meta-{id(self)}"

    def update_connector_output(self, output: Any) -> None:
        self.outputs += 1

    def request_finished(self, request: Any, block_ids: Any) -> tuple[bool, Any]:
        return self.delay, self.params

    def has_pending_stores(self) -> bool:
        return self.delay

    def gpu_pins(self) -> dict[int, int]:
        return {3: 1}

    def cpu_counts(self) -> None:
        return None

    def loading_finished(self) -> set[str]:
        return set()

    def reset_cache(self) -> bool | None:
        return self.resets

    def check_integrity(self) -> None: ...


def multi(*fakes: Fake) -> MultiConnectorScheduler:
    return MultiConnectorScheduler(list(fakes))  # type: ignore[arg-type]


def test_the_first_claim_wins_and_the_others_hear_of_no_tokens() -> None:
    first, second, third = Fake(0), Fake(8), Fake(12)
    connector = multi(first, second, third)
    request = make_request("r", range(10, 30), BLOCK)
    assert connector.get_num_new_matched_tokens(request, 4) == (8, True)
    assert (first.asked, second.asked, third.asked) == (1, 1, 1)  # every one is asked
    connector.update_state_after_alloc(request, None, 8)  # type: ignore[arg-type]
    assert [f.allocations for f in (first, second, third)] == [[("r", 0)], [("r", 8)],
                                                               [("r", 0)]]


def test_a_connector_still_looking_stops_the_asking() -> None:
    first, second = Fake(None), Fake(8)
    connector = multi(first, second)
    assert connector.get_num_new_matched_tokens(make_request("r", range(4), BLOCK), 0) == (
        None, False)
    assert second.asked == 0


def test_the_owner_is_kept_until_the_request_finishes() -> None:
    first, second = Fake(0), Fake(8)
    connector = multi(first, second)
    request = make_request("r", range(10, 30), BLOCK)
    connector.get_num_new_matched_tokens(request, 0)
    second.claim = 0  # a later admission claims nothing: the owner still hears of it
    connector.get_num_new_matched_tokens(request, 0)
    connector.update_state_after_alloc(request, None, 0)  # type: ignore[arg-type]
    assert second.allocations == [("r", 0)]
    connector.request_finished(request, ([1],))
    connector.update_state_after_alloc(request, None, 5)  # type: ignore[arg-type]
    assert second.allocations[-1] == ("r", 0) and first.allocations[-1] == ("r", 0)


def test_finishing_asks_every_connector_and_counts_extra_holders() -> None:
    handed = FinishedTransfer(((1, 2),), 8)
    connector = multi(Fake(delay=True), Fake(delay=True, params=handed), Fake())
    request = make_request("r", range(8), BLOCK)
    assert connector.request_finished(request, ([1, 2],)) == (True, handed)
    meta = connector.build_connector_meta(None)  # type: ignore[arg-type]
    assert isinstance(meta, MultiMetadata) and meta.extra_async_saves == {"r": 1}
    assert len(meta.metadata) == 3
    assert connector.build_connector_meta(None).extra_async_saves == {}  # type: ignore
    assert connector.gpu_pins() == {3: 3}


def test_two_connectors_handing_a_peer_parameters_is_refused() -> None:
    handed = FinishedTransfer(((1,),), 4)
    connector = multi(Fake(params=handed), Fake(params=handed))
    with pytest.raises(RuntimeError, match="two connectors hand a peer parameters"):
        connector.request_finished(make_request("r", range(4), BLOCK), ([1],))


@pytest.mark.parametrize(("results", "accepted"), [((None, True), True),
                                                   ((False, True), False),
                                                   ((None, None), True)])
def test_a_reset_reaches_every_connector(results: tuple[bool | None, ...],
                                         accepted: bool) -> None:
    fakes = [Fake(resets=r) for r in results]
    assert multi(*fakes).reset_cache() is accepted


def test_the_settings_are_one_nixl_and_one_offloading_connector() -> None:
    with pytest.raises(ValueError, match="one NIXL and one offloading connector"):
        MultiSettings((NixlSettings(), NixlSettings()))


def test_a_decode_request_pulls_while_its_blocks_are_offered_to_the_cpu_tier() -> None:
    """NIXL asked first: the decode request's prompt past its (empty) local hit is pulled into
    blocks 1-3, the CPU tier is told of no external tokens; once the pull lands and the request
    runs, the CPU tier stores its two full blocks."""
    scheduler = make_scheduler(24, block_size=BLOCK, max_num_batched_tokens=64,
                               kv_connector=MultiSettings((NixlSettings(),
                                                           OffloadingSettings(32))))
    scheduler.add_request(decode("d", range(10, 20)))
    output = scheduler.schedule()
    meta = output.kv_connector_metadata
    assert isinstance(meta, MultiMetadata)
    nixl, cpu = meta.metadata
    assert isinstance(nixl, NixlMetadata) and isinstance(cpu, OffloadingMetadata)
    assert nixl.reqs_to_recv == {"d": PullOrder(([1, 2, 3],), (0,), True)}
    assert cpu.load_jobs == {}
    scheduler.update_from_output(output, _empty_output())
    scheduler.update_from_output(scheduler.schedule(), _empty_output(
        KVConnectorOutput(finished_recving=frozenset("d"))))
    output = scheduler.schedule()
    assert dict(output.num_scheduled_tokens) == {"d": 1}  # the last prompt token, to sample
    meta = output.kv_connector_metadata
    assert isinstance(meta, MultiMetadata)
    nixl, cpu = meta.metadata
    assert isinstance(nixl, NixlMetadata) and nixl.reqs_to_recv == {}
    assert isinstance(cpu, OffloadingMetadata)
    assert [(job.req_id, job.gpu.block_ids) for job in cpu.store_jobs.values()] == [
        ("d", (1, 2))]  # the pulled full blocks go to the CPU tier
    scheduler.check_integrity()


def _empty_output(report: KVConnectorOutput | None = None) -> Any:
    from impl.sched.output import ModelRunnerOutput

    return ModelRunnerOutput([], {}, [], kv_connector_output=report or KVConnectorOutput())


@pytest.mark.parametrize(("behaviour", "flushed"), [(BEHAVIOUR_0_32, set()),
                                                    (BEHAVIOUR_0_33, {0})])
def test_blocks_a_pull_reuses_flush_a_store_under_0_33_only(behaviour: Behaviour,
                                                             flushed: set[int]) -> None:
    """`p` finishes in step 0 with its two full blocks' store in flight; in step 1 the decode
    request `d` gets those blocks for its pull. Under 0.33 the CPU tier counts them as handed
    out and flushes the store (`Behaviour.offloading_notes_every_allocation`)."""
    from impl.sched.output import ModelRunnerOutput

    scheduler = make_scheduler(4, block_size=BLOCK, max_num_batched_tokens=64,
                               max_model_len=12, behaviour=behaviour,
                               kv_connector=MultiSettings((NixlSettings(),
                                                           OffloadingSettings(32))))
    scheduler.add_request(make_request("p", range(100, 109), BLOCK, max_tokens=1))
    output = scheduler.schedule()
    scheduler.update_from_output(output, ModelRunnerOutput(
        ["p"], {"p": 0}, [[7]], kv_connector_output=KVConnectorOutput()))
    scheduler.add_request(decode("d", range(10, 19)))
    meta = scheduler.schedule().kv_connector_metadata
    assert isinstance(meta, MultiMetadata)
    nixl, cpu = meta.metadata
    assert isinstance(nixl, NixlMetadata) and isinstance(cpu, OffloadingMetadata)
    assert nixl.reqs_to_recv["d"].local_block_ids == ([3, 2, 1],)  # p's, freed tail first
    assert cpu.jobs_to_flush == flushed
