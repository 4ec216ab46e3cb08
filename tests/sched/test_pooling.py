"""A pooling model in the twin's scheduler: prefill-only requests finished by pooled output."""

from __future__ import annotations

from impl.sched.output import ModelRunnerOutput
from impl.sched.request import RequestStatus
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler, scheduled


def pool_step(s: Scheduler) -> tuple[dict[str, int], list[tuple[str, list[int], str | None]]]:
    """One step of a pooling runner: pooled output for every request whose prompt it ends."""
    out = s.schedule()
    ids = list(out.num_scheduled_tokens)
    pooled = frozenset(r for r in ids if s.requests[r].num_computed_tokens
                       >= s.requests[r].num_prompt_tokens)
    results = s.update_from_output(out, ModelRunnerOutput(
        ids, {r: i for i, r in enumerate(ids)}, [[] for _ in ids], pooled_req_ids=pooled))
    return scheduled(out), [(o.request_id, o.new_token_ids, o.finish_reason) for o in results]


def test_a_pooling_request_stops_with_no_token_the_step_its_prompt_is_computed() -> None:
    s = make_scheduler(max_num_batched_tokens=24, num_sampled_tokens_per_step=0)
    s.add_request(make_request("doc", range(100, 140), pooling=True))
    assert s.requests["doc"].max_tokens == 1
    assert pool_step(s) == ({"doc": 24}, [])  # a chunk: nothing pooled yet
    assert pool_step(s) == ({"doc": 16}, [("doc", [], "stop")])
    assert "doc" not in s.requests and s.kv_cache_manager.get_block_ids("doc") == ([],)
    s.check_integrity()


def test_a_pooling_prompt_may_fill_the_whole_context() -> None:
    """Nothing is sampled after the prompt, so no context slot is held back for a token."""
    s = make_scheduler(max_num_batched_tokens=16, max_model_len=32,
                       num_sampled_tokens_per_step=0)
    s.add_request(make_request("doc", range(100, 132), pooling=True))
    assert pool_step(s)[0] == {"doc": 16}
    assert pool_step(s) == ({"doc": 16}, [("doc", [], "stop")])


def test_a_generating_request_keeps_a_context_slot_for_its_token() -> None:
    s = make_scheduler(max_num_batched_tokens=16, max_model_len=32)
    s.add_request(make_request("r", range(100, 132)))
    assert scheduled(s.schedule()) == {"r": 16}
    assert scheduled(s.schedule()) == {"r": 15}


def test_an_unpooled_step_leaves_the_request_running() -> None:
    s = make_scheduler(num_sampled_tokens_per_step=0)
    s.add_request(make_request("doc", range(100, 110), pooling=True))
    out = s.schedule()
    s.update_from_output(out, ModelRunnerOutput(["doc"], {"doc": 0}, [[]]))
    assert s.requests["doc"].status == RequestStatus.RUNNING
