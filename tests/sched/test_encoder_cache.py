"""The encoder cache on its own: references by identifier, freeable entries, eviction order."""

from __future__ import annotations

import pytest

from impl.core.multimodal import MultiModalFeature
from impl.sched.encoder_cache import EncoderCacheManager
from impl.sched.request import Request
from vtwin.errors import IntegrityError


def request(request_id: str, *items: tuple[str, int]) -> Request:
    """A request showing `items` (identifier, placeholder count), one after another."""
    features, offset = [], 0
    for identifier, length in items:
        features.append(MultiModalFeature(identifier, offset, length))
        offset += length
    return Request(request_id, range(offset + 1), mm_features=features)


def take(cache: EncoderCacheManager, req: Request, index: int, budget: int = 1000) -> None:
    assert cache.can_allocate(req, index, budget, 0)
    cache.allocate(req, index)


def test_an_entry_is_shared_by_identifier_and_freeable_once_nobody_holds_it() -> None:
    cache = EncoderCacheManager(100)
    a, b = request("a", ("img", 30)), request("b", ("img", 30))
    take(cache, a, 0)
    assert cache.check_and_update_cache(b, 0)  # b reads a's output: no second copy
    assert (cache.num_free_slots, cache.num_freeable_slots) == (70, 70)
    cache.free(a)
    assert cache.num_freeable_slots == 70  # b still holds it
    cache.free(b)
    assert (cache.num_free_slots, cache.num_freeable_slots) == (70, 100)
    assert list(cache.freeable) == ["img"]
    cache.check_integrity({"a": a, "b": b})


def test_eviction_takes_the_oldest_freeable_entries_first_and_reports_them_once() -> None:
    cache = EncoderCacheManager(60)
    reqs = [request(f"r{i}", (f"img-{i}", 20)) for i in range(3)]
    for req in reqs:
        take(cache, req, 0)
    for req in (reqs[1], reqs[0], reqs[2]):  # freed in this order: img-1 is the oldest
        cache.free(req)
    new = request("new", ("img-new", 30))
    assert cache.can_allocate(new, 0, 1000, 0)
    assert cache.freed == ["img-1", "img-0"]  # 20 free after one, 40 after two: enough
    cache.allocate(new, 0)
    assert cache.get_freed_mm_hashes() == ["img-1", "img-0"]
    assert cache.get_freed_mm_hashes() == []
    assert sorted(cache.cached) == ["img-2", "img-new"]


def test_an_entry_evicted_and_allocated_again_in_one_step_is_not_reported_freed() -> None:
    cache = EncoderCacheManager(20)
    old = request("old", ("img", 20))
    take(cache, old, 0)
    cache.free(old)
    other = request("other", ("img-2", 20))
    take(cache, other, 0)  # evicts img
    cache.free(other)
    again = request("again", ("img", 20))
    take(cache, again, 0)  # evicts img-2, brings img back
    assert cache.get_freed_mm_hashes() == ["img-2"]


def test_budget_and_room_refuse_without_side_effects_when_nothing_can_be_evicted() -> None:
    cache = EncoderCacheManager(50)
    holder = request("holder", ("big", 40))
    take(cache, holder, 0)
    small = request("small", ("x", 20))
    assert not cache.can_allocate(small, 0, 19, 0)  # over the step's encoder budget
    assert not cache.can_allocate(small, 0, 1000, 0)  # 10 free, nothing freeable
    assert not cache.can_allocate(request("tiny", ("y", 5)), 0, 1000, 6)  # with 6 chosen
    assert cache.freed == [] and cache.num_free_slots == 10


def test_a_request_showing_an_image_twice_keeps_it_until_its_last_occurrence_goes() -> None:
    cache = EncoderCacheManager(100)
    twice = request("twice", ("img", 10), ("img", 10))
    take(cache, twice, 0)
    assert cache.check_and_update_cache(twice, 1)
    cache.free_encoder_input(twice, 0)
    assert cache.num_freeable_slots == 90  # still referenced through input 1
    cache.free_encoder_input(twice, 1)
    assert cache.num_freeable_slots == 100
    assert cache.request_inputs == {}


def test_reset_forgets_everything() -> None:
    cache = EncoderCacheManager(40)
    req = request("r", ("img", 10))
    take(cache, req, 0)
    cache.reset()
    assert (cache.num_free_slots, cache.num_freeable_slots, cache.cached) == (40, 40, {})
    assert not cache.check_and_update_cache(req, 0)


def test_masked_placeholders_cost_only_their_embeddings() -> None:
    feature = MultiModalFeature("img", 4, 6, (True, False, True, True, False, True))
    assert feature.num_embeds == 4
    assert feature.embeds_in_range(1, 4) == (1, 3)  # placeholders 1..3 hold embeds 1 and 2
    assert feature.embeds_in_range(1, 2) == (1, 1)  # a break token alone: no embedding
    assert feature.embeds_in_range(0, 1) == (0, 1)
    cache = EncoderCacheManager(4)
    req = Request("r", range(12), mm_features=[feature])
    take(cache, req, 0)
    assert cache.num_free_slots == 0


@pytest.mark.parametrize("corrupt", ["free slots", "freeable", "reference", "gone"])
def test_integrity_names_what_broke(corrupt: str) -> None:
    cache = EncoderCacheManager(100)
    a, b = request("a", ("img", 30)), request("b", ("other", 10))
    take(cache, a, 0)
    take(cache, b, 0)
    cache.free(b)
    requests = {"a": a, "b": b}
    if corrupt == "free slots":
        cache.num_free_slots += 1
    elif corrupt == "freeable":
        cache.freeable.pop("other")
    elif corrupt == "reference":
        cache.cached["img"].discard("a")
        cache.freeable["img"] = 30
        cache.num_freeable_slots += 30
    else:
        del requests["a"]
    with pytest.raises(IntegrityError, match="encoder cache"):
        cache.check_integrity(requests)
