"""Structured output in the twin's scheduler: waiting for a grammar, failed compiles, the
grammar bitmask's rows and drafts trimmed at the first token the grammar rejects."""

from __future__ import annotations

import pytest

from impl.sched.grammar import Grammar, GrammarState
from impl.sched.output import DraftTokenIds
from impl.sched.request import RequestStatus
from impl.sched.scheduler import Scheduler
from impl.sched.structured_output import GrammarOutput
from tests.sched.helpers import EOS, make_request, make_scheduler, scheduled, step
from vtwin.errors import IntegrityError


def grammar(state: GrammarState = GrammarState.COMPILING) -> Grammar:
    """Accepts 10..19, and EOS."""
    return Grammar(10, 20, (EOS,), state)


def skipped(s: Scheduler) -> int:
    stats = s.make_stats()
    assert stats is not None
    return stats.num_skipped_waiting_reqs


def test_a_request_waits_for_its_grammar_skipped_from_arrival_then_runs_once_compiled() -> None:
    s = make_scheduler()
    s.add_request(make_request("g", range(100, 120), grammar=grammar()))
    s.add_request(make_request("p", range(200, 210)))
    assert s.requests["g"].status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
    assert skipped(s) == 1  # counted as skipped before admission ever looked at it
    out, _ = step(s)
    assert scheduled(out) == {"p": 10}  # passed over; the request behind it is admitted
    assert [r.request_id for r in s.waiting] == ["g"] and skipped(s) == 1
    s.check_integrity()
    s.requests["g"].grammar.state = GrammarState.READY  # type: ignore[union-attr]
    out, _ = step(s)
    assert scheduled(out) == {"p": 1, "g": 20}
    assert s.requests["g"].status == RequestStatus.RUNNING and skipped(s) == 0
    s.check_integrity()


def test_a_promoted_request_that_does_not_fit_stays_waiting_and_counted_as_skipped() -> None:
    s = make_scheduler(max_num_seqs=1)
    s.add_request(make_request("p", range(200, 210)))
    s.add_request(make_request("g", range(100, 120), grammar=grammar(GrammarState.READY)))
    step(s)
    assert s.requests["g"].status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
    assert skipped(s) == 1  # no seat: admission never reached it, its grammar unread


def test_a_failed_compile_ends_the_request_with_an_error_after_the_step_that_reached_it(
) -> None:
    s = make_scheduler()
    s.add_request(make_request("g", range(100, 120), grammar=grammar(GrammarState.FAILED)))
    s.add_request(make_request("p", range(200, 210)))
    out, outputs = step(s)
    assert scheduled(out) == {"p": 10}
    assert [(o.request_id, o.new_token_ids, o.finish_reason) for o in outputs] == [
        ("p", [7], None), ("g", [], "error")]
    assert "g" not in s.requests and "g" in s.finished_req_ids
    assert s.kv_cache_manager.get_block_ids("g") == ([],)
    s.check_integrity()


def test_the_bitmask_rows_are_the_scheduled_decodes_with_a_grammar_in_batch_order() -> None:
    s = make_scheduler(max_num_batched_tokens=30)
    s.add_request(make_request("a", range(100, 104), grammar=grammar(GrammarState.READY)))
    s.add_request(make_request("plain", range(200, 204)))
    s.add_request(make_request("long", range(300, 340), grammar=grammar(GrammarState.READY)))
    out = s.schedule()
    # "long" is cut to a prefill chunk (30 - 8 = 22 of 40 tokens): it samples nothing.
    assert scheduled(out) == {"a": 4, "plain": 4, "long": 22}
    assert s.get_grammar_bitmask(out) == GrammarOutput(("a",), (0,))


def test_no_bitmask_without_a_scheduled_grammar_request() -> None:
    s = make_scheduler()
    s.add_request(make_request("plain", range(200, 204)))
    assert s.get_grammar_bitmask(s.schedule()) is None


@pytest.mark.parametrize(("drafts", "kept"), [
    ([11, 12, 13], [11, 12, 13]),
    ([11, 99, 13], [11]),  # stops at the first rejected token, even if later ones fit
    ([EOS, 12, 13], [EOS, 12, 13]),  # ending tokens are accepted
    ([50, 12, 13], []),
    ([19, 20, 12], [19]),  # the range is half-open: 20 is out
])
def test_drafts_are_trimmed_at_the_first_token_the_grammar_rejects(drafts: list[int],
                                                                   kept: list[int]) -> None:
    s = make_scheduler(num_spec_tokens=3)
    s.add_request(make_request("g", range(100, 104), grammar=grammar(GrammarState.READY)))
    step(s, lambda _: [11])
    s.update_draft_token_ids(DraftTokenIds(["g"], [drafts]))
    assert s.requests["g"].spec_token_ids == kept
    out = s.schedule()
    assert scheduled(out) == {"g": 1 + len(kept)}
    assert s.get_grammar_bitmask(out) == GrammarOutput(("g",), (len(kept),))


def test_padding_ends_the_drafts_the_bitmask_covers() -> None:
    assert Grammar(0, 100).valid_prefix([5, -1, 6]) == [5]
    assert Grammar(0, 100).valid_prefix([0, 5]) == [0, 5]  # token 0 is a token, not padding


def test_a_draft_of_token_zero_is_covered_by_the_bitmask() -> None:
    s = make_scheduler(num_spec_tokens=3)
    s.add_request(make_request("g", range(100, 104), grammar=Grammar(0, 20, (EOS,),
                                                                     GrammarState.READY)))
    step(s, lambda _: [11])
    s.update_draft_token_ids(DraftTokenIds(["g"], [[0, 1, 99]]))
    out = s.schedule()
    assert s.get_grammar_bitmask(out) == GrammarOutput(("g",), (2,))


def test_integrity_catches_a_grammar_request_not_counted_as_skipped() -> None:
    s = make_scheduler()
    s.add_request(make_request("g", range(100, 120), grammar=grammar()))
    s.deferred_waiting.discard("g")
    with pytest.raises(IntegrityError, match="waits for a grammar"):
        s.check_integrity()


def test_async_a_grammar_request_with_a_step_in_flight_makes_the_step_wait() -> None:
    s = make_scheduler(asynchronous=True, num_spec_tokens=2)
    s.add_request(make_request("g", range(100, 104), grammar=grammar(GrammarState.READY)))
    first = s.schedule()
    assert not first.pending_structured_output_tokens  # nothing of it in flight yet
    second = s.schedule()  # the first step's output not applied: a placeholder in flight
    assert second.pending_structured_output_tokens
    assert second.scheduled_spec_decode_tokens == {"g": [-1, -1]}


def test_async_deferred_drafts_are_trimmed_padded_and_counted_invalid() -> None:
    s = make_scheduler(asynchronous=True, num_spec_tokens=3)
    s.add_request(make_request("g", range(100, 104), grammar=grammar(GrammarState.READY)))
    s.add_request(make_request("plain", range(200, 204)))
    s.schedule()
    out = s.schedule()
    s.add_request(make_request("new", range(400, 440)))  # a prefill chunk: no placeholders
    drafts = DraftTokenIds(["gone", "new", "g", "plain"],
                           [[1, 2, 3], [4, 4, 4], [11, 99, 12, 13], [5, 6, 7]])
    s.update_draft_token_ids_in_output(drafts, out)
    # Cut to the three scheduled, trimmed at 99, padded back; plain requests keep theirs.
    assert out.scheduled_spec_decode_tokens == {"g": [11, -1, -1], "plain": [5, 6, 7]}
    assert out.num_invalid_spec_tokens == {"g": 2}
    assert s.get_grammar_bitmask(out) == GrammarOutput(("g",), (1,))
