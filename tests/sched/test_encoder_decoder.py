"""Encoder-decoder models in the twin (Whisper): the encoder runs on a request's first step,
its output sizes the cross-attention blocks, and the encoder's room is upstream's accounting
(`impl.sched.encoder_decoder_cache`). Exact block ids."""

from __future__ import annotations

import pytest

from impl.core.multimodal import MultiModalFeature
from impl.core.specs import (
    CrossAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from impl.sched.config import SchedulerConfig
from impl.sched.encoder_decoder_cache import EncoderDecoderCacheManager
from impl.sched.request import Request
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, finish, make_request, scheduled, step
from vtwin.errors import IntegrityError


def ed_scheduler(num_blocks: int = 160, budget: int = 200, cache: int = 200,
                 **config: object) -> Scheduler:
    settings: dict[str, object] = {
        "max_num_seqs": 4, "max_num_batched_tokens": 256, "max_model_len": 256,
        "block_size": 4, "enable_prefix_caching": False, "enable_chunked_prefill": False,
        "disable_chunked_mm_input": True,
        "max_num_encoder_input_tokens": budget, "encoder_cache_size": cache}
    settings.update(config)
    groups = (KVCacheGroupSpec(("self",), FullAttentionSpec(block_size=4)),
              KVCacheGroupSpec(("cross",), CrossAttentionSpec(block_size=4)))
    return Scheduler(SchedulerConfig(**settings),  # type: ignore[arg-type]
                     KVCacheConfig(num_blocks, groups), none_hash=NONE_HASH, log_stats=True)


def audio(identifier: str, frames: int) -> list[MultiModalFeature]:
    return [MultiModalFeature(identifier, 0, frames)]


def asr(request_id: str, frames: int, prompt: int = 3, **kwargs: object) -> Request:
    return make_request(request_id, range(100, 100 + prompt), block_size=4,
                        mm_features=audio(f"audio-{request_id}", frames), **kwargs)


def test_the_encoder_runs_on_the_first_step_and_sizes_the_cross_attention_blocks() -> None:
    s = ed_scheduler()
    s.add_request(asr("a", 10))
    out, _ = step(s)
    assert out.scheduled_encoder_inputs == {"a": [0]}
    # 3 prompt tokens: one self-attention block; 10 encoder tokens: three cross blocks.
    assert [list(ids) for ids in s.kv_cache_manager.get_block_ids("a")] == [[1], [2, 3, 4]]
    for _ in range(3):
        out, _ = step(s)
        assert out.scheduled_encoder_inputs == {}  # never again
    assert [list(ids) for ids in s.kv_cache_manager.get_block_ids("a")] == [[1, 5], [2, 3, 4]]


def test_a_text_request_gets_no_cross_attention_blocks() -> None:
    s = ed_scheduler()
    s.add_request(make_request("t", range(100, 106), block_size=4))
    step(s)
    assert [list(ids) for ids in s.kv_cache_manager.get_block_ids("t")] == [[1, 2], []]


def test_room_is_given_back_after_every_decode_step_as_upstream_does() -> None:
    s = ed_scheduler(cache=200)
    s.add_request(asr("a", 150))
    out = s.schedule()
    assert s.encoder_cache.num_free_slots == 50  # taken for the step that encodes
    finish(s, out)
    assert s.encoder_cache.num_free_slots == 200  # one token computed: the input is freed
    step(s)
    assert s.encoder_cache.num_free_slots == 350  # ... and again after every step
    s.check_integrity()


def test_two_inputs_past_the_cache_size_are_encoded_once_the_room_has_grown() -> None:
    s = ed_scheduler(cache=200, budget=400)
    s.add_request(asr("long", 150, max_tokens=40))
    for _ in range(3):
        step(s)
    s.add_request(asr("x", 150))
    s.add_request(asr("y", 150))
    out, _ = step(s)
    assert out.scheduled_encoder_inputs == {"x": [0], "y": [0]}  # 300 > 200


def test_the_worker_hears_of_an_encoded_input_one_step_late() -> None:
    s = ed_scheduler()
    s.add_request(asr("a", 10))
    first, _ = step(s)
    second, _ = step(s)
    third, _ = step(s)
    assert (first.free_encoder_mm_hashes, second.free_encoder_mm_hashes,
            third.free_encoder_mm_hashes) == ([], ["audio-a"], [])


def test_the_encoder_budget_holds_back_an_input_that_does_not_fit_the_step() -> None:
    s = ed_scheduler(budget=100, cache=400)
    s.add_request(asr("a", 80))
    s.add_request(asr("b", 80))
    out, _ = step(s)
    assert scheduled(out) == {"a": 3} and out.scheduled_encoder_inputs == {"a": [0]}
    out, _ = step(s)
    assert out.scheduled_encoder_inputs == {"b": [0]}


def test_a_preempted_request_frees_its_cross_blocks_and_encodes_again() -> None:
    s = ed_scheduler()
    s.add_request(asr("a", 10))
    step(s)
    request = s.requests["a"]
    s.running.remove(request)
    s._preempt_request(request)
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == 159
    out, _ = step(s)
    assert out.scheduled_encoder_inputs == {"a": [0]}
    assert len(s.kv_cache_manager.get_block_ids("a")[1]) == 3


def test_a_failed_allocation_gives_back_room_it_never_took() -> None:
    """The pool cannot hold the input's cross-attention blocks: the admission fails after
    the input was chosen, and freeing the request gives its room back anyway (upstream)."""
    s = ed_scheduler(num_blocks=32, cache=200)
    s.add_request(asr("a", 150))  # 38 cross blocks > 31
    out, _ = step(s)
    assert scheduled(out) == {} and s.encoder_cache.num_free_slots == 350


def test_the_model_refuses_prefix_caching_and_chunked_prefill_and_needs_an_encoder() -> None:
    with pytest.raises(ValueError, match="enable_prefix_caching: must be off for an "
                       "encoder-decoder model"):
        ed_scheduler(enable_prefix_caching=True)
    with pytest.raises(ValueError, match="enable_chunked_prefill: must be off"):
        ed_scheduler(enable_chunked_prefill=True)
    with pytest.raises(ValueError, match="encoder_cache_size: an encoder-decoder model needs"):
        ed_scheduler(cache=0)


def test_an_encoder_decoder_cache_keeps_no_entries() -> None:
    cache = EncoderDecoderCacheManager(10)
    request = asr("a", 4)
    assert not cache.check_and_update_cache(request, 0) and cache.cached_num_embeds("x") is None
    assert cache.can_allocate(request, 0, 10, 6) and not cache.can_allocate(request, 0, 10, 7)
    assert not cache.can_allocate(request, 0, 3, 0)  # over the step's budget
    cache.allocate(request, 0)
    cache.check_integrity({})
    cache.cached["x"] = set()
    with pytest.raises(IntegrityError, match="keeps entries"):
        cache.check_integrity({})
    cache.reset()
    assert (cache.num_free_slots, cache.allocated, cache.cached) == (10, [], {})



def test_unchunked_inputs_never_cut_an_encoder_decoder_chunk_under_either_release() -> None:
    """Upstream sets `disable_chunked_mm_input` for these models; the input sits at offset 0
    and counts encoder tokens, so 0.33's `<=` start rule must not cut the prompt to nothing."""
    from impl.behaviour import BEHAVIOUR_0_32, BEHAVIOUR_0_33

    for behaviour in (BEHAVIOUR_0_32, BEHAVIOUR_0_33):
        s = ed_scheduler(behaviour=behaviour)
        s.add_request(asr("a", 40))
        out, _ = step(s)
        assert scheduled(out) == {"a": 3} and out.scheduled_encoder_inputs == {"a": [0]}
