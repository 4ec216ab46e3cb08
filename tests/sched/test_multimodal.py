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


# Exact decisions of `_try_schedule_encoder_inputs` at its edges (mutation killers).

def test_a_one_token_chunk_that_reaches_an_item_encodes_it() -> None:
    s = mm_scheduler()
    r = make_request("r", range(100, 140), mm_features=[image("img", 0, 8)])
    assert s._try_schedule_encoder_inputs(r, 0, 1, 64) == ([0], 1, 56, [])


def test_no_tokens_means_no_encoder_decision_even_inside_an_item() -> None:
    s = mm_scheduler()
    r = make_request("r", range(100, 140), mm_features=[image("img", 0, 8)])
    s.encoder_cache.allocate(make_request("o", range(9), mm_features=[image("img", 0, 8)]), 0)
    assert s._try_schedule_encoder_inputs(r, 4, 0, 64) == ([], 0, 64, [])
    assert s.encoder_cache.cached["img"] == {"o"}  # r took no reference


def test_a_chunk_starting_inside_an_item_it_cannot_encode_gets_nothing() -> None:
    s = mm_scheduler(budget=8)
    r = make_request("r", range(100, 140), mm_features=[image("img", 4, 12)])
    assert s._try_schedule_encoder_inputs(r, 8, 16, 8) == ([], 0, 8, [])


def test_an_item_without_embeddings_in_the_chunk_is_passed_over_not_the_end() -> None:
    s = mm_scheduler()
    breaks = MultiModalFeature("start", 0, 4, (False, False, True, True))
    r = make_request("r", range(100, 140), mm_features=[breaks, image("img", 4, 4)])
    # The chunk 2..10 covers breaks' two embeddings and img: both encoded. From 0..2 only
    # break tokens of the first item: skipped, and the chunk goes on to nothing else.
    assert s._try_schedule_encoder_inputs(r, 0, 2, 64) == ([], 2, 64, [])
    r2 = make_request("r2", range(100, 140),
                      mm_features=[MultiModalFeature("lead", 0, 4, (False, False, False, True)),
                                   image("next", 4, 4)])
    assert s._try_schedule_encoder_inputs(r2, 0, 3, 64) == ([], 3, 64, [])
    r3 = make_request("r3", range(100, 140),
                      mm_features=[MultiModalFeature("only-breaks", 0, 2, (True, False)),
                                   image("after", 2, 4)])
    # From 1 the first item has only its break token left; the chunk 1..6 reaches "after".
    assert s._try_schedule_encoder_inputs(r3, 1, 5, 64) == ([1], 5, 60, [])


def test_items_chosen_in_one_chunk_add_up_against_the_cache() -> None:
    s = mm_scheduler(budget=64, cache=25)
    r = make_request("r", range(100, 160),
                     mm_features=[image("a", 0, 10), image("b", 10, 10), image("c", 20, 10)])
    # a and b take 20 of 25: c's 10 do not fit, so the chunk stops at c.
    assert s._try_schedule_encoder_inputs(r, 0, 40, 64) == ([0, 1], 20, 44, [])


def test_an_item_is_released_only_once_outputs_in_flight_are_excluded() -> None:
    s = mm_scheduler()
    r = make_request("r", range(100, 140), mm_features=[image("img", 0, 10)])
    s.encoder_cache.allocate(r, 0)
    r.num_computed_tokens, r.num_output_placeholders = 12, 3  # 9 really computed
    s._free_encoder_inputs(r)
    assert s.encoder_cache.cached["img"] == {"r"}
    r.num_output_placeholders = 2
    s._free_encoder_inputs(r)
    assert s.encoder_cache.cached["img"] == set()


def test_a_chunk_ending_in_an_items_leading_break_tokens_encodes_nothing() -> None:
    s = mm_scheduler()
    lead = MultiModalFeature("x", 4, 4, (False, False, True, True))
    r = make_request("r", range(100, 140), mm_features=[lead])
    assert s._try_schedule_encoder_inputs(r, 0, 6, 64) == ([], 6, 64, [])
    assert s._try_schedule_encoder_inputs(r, 0, 7, 64) == ([0], 7, 62, [])


def test_iteration_details_count_the_scheduled_inputs_and_their_embeddings() -> None:
    """Upstream's enable_logging_iteration_details: the output counts the encoder inputs it
    schedules and the embeddings they produce (placeholders that are not embeddings left
    out); nothing without inputs, with the option off, or with stats off."""
    partial = MultiModalFeature("partial", 30, 10, (True, False) * 5)
    features = [image("whole", 0, 20), partial]
    for config, log_stats, expected in (({"log_iteration_details": True}, True, (2, 25)),
                                        ({}, True, None),
                                        ({"log_iteration_details": True}, False, None)):
        s = mm_scheduler(**config)
        s.log_stats = log_stats
        s.add_request(make_request("a", range(100, 160), mm_features=features))
        out, _ = step(s)
        assert out.scheduled_encoder_inputs == {"a": [0, 1]}
        assert out.scheduled_encoder_input_stats == expected, config
        out, _ = step(s)
        assert out.scheduled_encoder_input_stats is None  # a decode step encodes nothing


def test_the_engine_raises_budget_and_cache_to_the_models_largest_item() -> None:
    s = mm_scheduler(budget=64, cache=100, mm_max_tokens_per_item=80)
    assert s.max_num_encoder_input_tokens == 80 and s.encoder_cache.cache_size == 100
    s = mm_scheduler(budget=64, cache=60, mm_max_tokens_per_item=70)
    assert (s.max_num_encoder_input_tokens, s.encoder_cache.num_free_slots) == (70, 70)
    s = mm_scheduler(budget=64, cache=128)
    assert (s.max_num_encoder_input_tokens, s.encoder_cache.cache_size) == (64, 128)


def test_an_unsplittable_largest_item_longer_than_a_step_is_refused_at_start() -> None:
    import pytest

    with pytest.raises(ValueError, match="max_num_batched_tokens: 256 is below the model's "
                       "largest multimodal item"):
        mm_scheduler(mm_max_tokens_per_item=257, disable_chunked_mm_input=True)
    mm_scheduler(mm_max_tokens_per_item=256, disable_chunked_mm_input=True)
    mm_scheduler(mm_max_tokens_per_item=257)  # chunks may split it: fine


def test_a_model_with_every_modality_disabled_starts_no_encoder() -> None:
    s = mm_scheduler(budget=64, cache=128, mm_max_tokens_per_item=0)
    assert (s.max_num_encoder_input_tokens, s.encoder_cache.cache_size) == (0, 0)
