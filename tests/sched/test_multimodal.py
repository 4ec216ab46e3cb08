"""Multimodal scheduling in the twin: encoder budget and cache decide how far a chunk goes."""

from __future__ import annotations

import dataclasses

from impl.behaviour import BEHAVIOUR_0_32, BEHAVIOUR_0_33
from impl.core.multimodal import MultiModalFeature, mm_hash_keys
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler, scheduled, step


def mm_scheduler(budget: int = 64, cache: int = 128, **config: object) -> Scheduler:
    return make_scheduler(max_num_encoder_input_tokens=budget, encoder_cache_size=cache,
                          **config)


def image(identifier: str, offset: int, length: int) -> MultiModalFeature:
    return MultiModalFeature(identifier, offset, length)


def test_an_item_is_encoded_in_the_step_that_first_reaches_it_and_shared_later() -> None:
    s = mm_scheduler()
    s.add_request(make_request("a", range(100, 160), mm_features=[image("img", 10, 20)]))
    out, _ = step(s)
    assert out.scheduled_encoder_inputs == {"a": [0]}
    s.add_request(make_request("b", range(300, 360), mm_features=[image("img", 5, 20)]))
    out = s.schedule()
    assert scheduled(out) == {"a": 1, "b": 60}
    assert out.scheduled_encoder_inputs == {}  # b reads a's cached output
    assert s.encoder_cache.cached["img"] == {"b"}  # a let it go once its step passed it


def test_a_chunk_stops_before_an_item_the_encoder_budget_cannot_take() -> None:
    s = mm_scheduler(budget=40)
    s.add_request(make_request("a", range(100, 140), mm_features=[image("img-a", 0, 30)]))
    s.add_request(make_request("b", range(300, 360), mm_features=[image("img-b", 25, 30)]))
    out, _ = step(s)
    # a's item takes 30 of 40: b's 30 do not fit, so b computes only up to its item.
    assert out.scheduled_encoder_inputs == {"a": [0]}
    assert scheduled(out) == {"a": 40, "b": 25}
    out, _ = step(s)
    assert out.scheduled_encoder_inputs == {"b": [0]}


def test_items_the_decoder_has_passed_are_released_after_the_step_and_on_preemption() -> None:
    s = mm_scheduler(max_num_batched_tokens=32)
    s.add_request(make_request("a", range(100, 164),
                               mm_features=[image("x", 0, 16), image("y", 40, 16)]))
    step(s)  # computes 0..32: x passed, y not reached
    assert s.encoder_cache.cached == {"x": set()} and list(s.encoder_cache.freeable) == ["x"]
    out = s.schedule()  # 32..64 encodes y; the step has not run yet
    assert out.scheduled_encoder_inputs == {"a": [1]} and s.encoder_cache.cached["y"] == {"a"}
    request = s.requests["a"]
    s.running.remove(request)
    s._preempt_request(request)
    assert s.encoder_cache.cached["y"] == set()
    s.check_integrity()


def test_disable_chunked_mm_input_stops_a_chunk_before_an_item_it_cannot_cover() -> None:
    s = mm_scheduler(max_num_batched_tokens=32, disable_chunked_mm_input=True)
    s.add_request(make_request("a", range(100, 160), mm_features=[image("img", 20, 24)]))
    out, _ = step(s)
    assert scheduled(out) == {"a": 20}  # 0..32 would end inside 20..44
    out, _ = step(s)
    assert scheduled(out) == {"a": 32} and out.scheduled_encoder_inputs == {"a": [0]}


def test_a_chunk_starting_at_an_item_it_cannot_cover_splits_it_in_0_32_and_waits_in_0_33(
        ) -> None:
    results = {}
    for name, behaviour in (("0.32", BEHAVIOUR_0_32), ("0.33", BEHAVIOUR_0_33)):
        s = mm_scheduler(max_num_batched_tokens=40, long_prefill_token_threshold=20,
                         disable_chunked_mm_input=True, behaviour=behaviour)
        s.add_request(make_request("a", range(100, 200)))
        s.add_request(make_request("b", range(300, 380), mm_features=[image("img", 10, 30)]))
        first, _ = step(s)
        assert scheduled(first) == {"a": 20, "b": 10}  # b stops before its item (10..40)
        second, _ = step(s)
        results[name] = (scheduled(second), second.scheduled_encoder_inputs)
    assert results["0.32"] == ({"a": 20, "b": 20}, {"b": [0]})  # from the item's start: split
    assert results["0.33"] == ({"a": 20}, {})  # 20 of the item's 30: not before it, wait


def test_a_waiting_request_blocked_by_the_encoder_stops_admission_in_0_32_only() -> None:
    results = {}
    for name, behaviour in (("0.32", BEHAVIOUR_0_32), ("0.33", BEHAVIOUR_0_33)):
        s = mm_scheduler(budget=30, behaviour=behaviour)
        s.add_request(make_request("img1", range(100, 140), mm_features=[image("p", 0, 30)]))
        s.add_request(make_request("img2", range(200, 240), mm_features=[image("q", 0, 30)]))
        s.add_request(make_request("text", range(300, 320)))
        results[name] = scheduled(s.schedule())
    assert results["0.32"] == {"img1": 40}  # img2 gets 0 tokens: admission stops there
    assert results["0.33"] == {"img1": 40, "text": 20}  # img2 skipped, text behind it goes


def test_an_identifier_reused_with_another_size_finishes_the_request_with_an_error() -> None:
    s = mm_scheduler()
    s.add_request(make_request("a", range(100, 140), mm_features=[image("img", 0, 20)]))
    step(s)
    s.add_request(make_request("b", range(300, 340), mm_features=[image("img", 0, 19)]))
    out, results = step(s)
    assert "b" not in scheduled(out)
    assert [(r.request_id, r.finish_reason) for r in results if r.finish_reason] == [
        ("b", "error")]
    assert "b" not in s.requests
    s.check_integrity()


def test_item_identifiers_key_the_blocks_their_placeholders_fill() -> None:
    tokens = range(100, 148)
    cat = make_request("cat", tokens, mm_features=[image("cat", 20, 16)])
    dog = make_request("dog", tokens, mm_features=[image("dog", 20, 16)])
    cat2 = make_request("cat2", tokens, mm_features=[image("cat", 20, 16)])
    assert cat.block_hashes[0] == dog.block_hashes[0]  # block 0..16 shows no image
    assert cat.block_hashes[1] != dog.block_hashes[1]
    assert cat.block_hashes == cat2.block_hashes
    assert mm_hash_keys(cat.mm_features, 16, 32) == [("mm", "cat", 4)]
    assert mm_hash_keys(cat.mm_features, 32, 48) == [("mm", "cat", -12)]
    assert mm_hash_keys(cat.mm_features, 48, 64) == []


def test_reset_encoder_cache_forgets_outputs() -> None:
    s = mm_scheduler()
    s.add_request(make_request("a", range(100, 140), mm_features=[image("img", 0, 20)]))
    step(s)
    s.reset_encoder_cache()
    assert s.encoder_cache.cached == {}


def test_the_behaviour_presets_name_both_encoder_switches() -> None:
    names = {f.name for f in dataclasses.fields(BEHAVIOUR_0_32)}
    assert {"unchunked_item_start_counts_as_before", "encoder_blocked_admission_skips"} <= names
