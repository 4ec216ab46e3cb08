"""A request's own caps on the OffloadingConnector (`OffloadLimits`), inside the scheduler,
with exact block ids and chunk slots: `max_offload_tokens` bounds what the request stores,
`max_load_tokens` what a lookup loads past the local hit, cut to whole chunks."""

from __future__ import annotations

import pytest

from impl.connector.types import OffloadLimits
from impl.sched.request import Request
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request
from tests.sched.test_offloading_connector import (
    BLOCK,
    connector,
    offloading_scheduler,
    run_step,
)
from tests.sched.test_offloading_windows import hybrid_scheduler, store_then_evict

PROMPT = range(10, 30)  # 20 tokens: five blocks of 4


def capped(request_id: str, max_load: int | None = None, max_offload: int | None = None,
           prompt: range = PROMPT) -> Request:
    return make_request(request_id, prompt, BLOCK, max_tokens=2,
                        offload_limits=OffloadLimits(max_load, max_offload))


def store_and_evict(scheduler: Scheduler, evicting_tokens: int = 64) -> None:
    """`a` stores its prompt's chunks; `b` (another prompt of `evicting_tokens`) then fills
    the GPU, evicting them (64 tokens: all of them; 56: all but the first two blocks, which
    stay a local hit)."""
    scheduler.add_request(make_request("a", PROMPT, BLOCK, max_tokens=1))
    run_step(scheduler)
    run_step(scheduler, done=(0,))
    scheduler.add_request(make_request("b", range(100, 100 + evicting_tokens), BLOCK,
                                       max_tokens=1))
    run_step(scheduler)
    run_step(scheduler, done=(1,))
    assert not connector(scheduler).jobs


def test_max_offload_tokens_stores_only_the_chunks_below_it() -> None:
    scheduler = offloading_scheduler()
    scheduler.add_request(capped("a", max_offload=9))
    _, meta = run_step(scheduler)
    (job,) = meta.store_jobs.values()
    assert (job.gpu.block_ids, job.cpu_slots) == ((1, 2), (0, 1))  # 8 tokens: two chunks


def test_max_offload_tokens_zero_stores_nothing() -> None:
    scheduler = offloading_scheduler()
    scheduler.add_request(capped("a", max_offload=0))
    _, meta = run_step(scheduler)
    assert not meta.store_jobs
    assert connector(scheduler).cpu_counts() == (0, 0, 32)


def test_max_load_tokens_caps_the_hit_past_the_local_one() -> None:
    scheduler = offloading_scheduler(num_blocks=17)
    store_and_evict(scheduler)
    scheduler.add_request(capped("c", max_load=9))
    _, meta = run_step(scheduler)
    assert scheduler.step_external_hits == [("c", 8)]  # 9 cut to two whole chunks
    (job,) = meta.load_jobs.values()
    assert job.cpu_slots == (0, 1)


def test_max_load_tokens_counts_from_the_local_hit() -> None:
    scheduler = offloading_scheduler(num_blocks=17)
    store_and_evict(scheduler, evicting_tokens=56)
    scheduler.add_request(capped("c", max_load=9))
    _, meta = run_step(scheduler)
    # 8 tokens on the GPU, then 8 + 9 cut to 16: two chunks past them, not two from token 0.
    assert scheduler.step_external_hits == [("c", 8)]
    assert scheduler.requests["c"].num_computed_tokens == 16
    (job,) = meta.load_jobs.values()
    assert job.cpu_slots == (2, 3)


def test_max_load_tokens_zero_loads_nothing() -> None:
    scheduler = offloading_scheduler(num_blocks=17)
    store_and_evict(scheduler)
    scheduler.add_request(capped("c", max_load=0))
    output, meta = run_step(scheduler)
    assert not meta.load_jobs
    assert output.num_scheduled_tokens["c"] == 20  # computed again from the start


@pytest.mark.parametrize(("cap", "hit"), [(12, 8), (16, 16), (None, 16)])
def test_a_capped_load_ends_on_a_whole_chunk_of_several_blocks(cap: int | None,
                                                                hit: int) -> None:
    # Chunks of two blocks (8 tokens): 20 tokens hold two. A cap of 12 would end inside the
    # second chunk; the hit is cut to the first.
    scheduler = offloading_scheduler(num_blocks=17, blocks_per_chunk=2)
    store_and_evict(scheduler)
    scheduler.add_request(capped("c", max_load=cap))
    _, meta = run_step(scheduler)
    assert scheduler.step_external_hits == [("c", hit)]
    (job,) = meta.load_jobs.values()
    assert len(job.gpu.block_ids) == hit // BLOCK


@pytest.mark.parametrize(("cap", "hit"), [(8, 4), (12, 8), (None, 11)])
def test_beside_a_window_the_cap_comes_before_the_last_token_rule(cap: int | None,
                                                                   hit: int) -> None:
    """A 12-token prompt stored, evicted and sent again beside a sliding window: uncapped, the
    hit stops a token short (11); capped at 8 it stops at 8, then a token short (7), then at a
    whole chunk (4); a cap of the prompt's length is cut to a whole chunk too (8)."""
    scheduler = hybrid_scheduler(retention=None, num_blocks=9)
    store_then_evict(scheduler, range(10, 22))
    scheduler.add_request(capped("b", max_load=cap, prompt=range(10, 22)))
    run_step(scheduler)
    assert scheduler.step_external_hits == [("b", hit)]
