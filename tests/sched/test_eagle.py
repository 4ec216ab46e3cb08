"""An EAGLE drafter (`spec_method` "eagle"): vLLM 0.32 makes every prefix hit give up its last
block (the head wrote the KV of the token after the chunk there); 0.33 hashes each block
together with the token after it instead, and keeps the whole hit. Exact counts, checked
against both releases by the suite workloads `eagle-multi-turn` and
`eagle-hybrid-sliding-window` and the Hypothesis family's EAGLE configs."""

from __future__ import annotations

import pytest

from impl.behaviour import behaviour_for
from impl.core.request_hasher import RequestBlockHasher
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from impl.sched.config import SchedulerConfig
from impl.sched.request import Request
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, step

PROMPT = range(1000, 1100)  # 100 tokens: 6 full blocks of 16


def _scheduler(release: str, spec_method: str = "eagle") -> Scheduler:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=256, max_model_len=512,
                             num_spec_tokens=2, num_lookahead_tokens=2, spec_method=spec_method,
                             behaviour=behaviour_for(release))
    kv_config = KVCacheConfig(40, (KVCacheGroupSpec(("full",), FullAttentionSpec(16)),))
    return Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=True)


def _request(scheduler: Scheduler, request_id: str) -> Request:
    hasher = RequestBlockHasher(16, "sha256", NONE_HASH,
                                lookahead=scheduler.scheduler_config.num_hash_lookahead_tokens)
    return Request(request_id, PROMPT, block_hasher=hasher, max_tokens=1, eos_token_id=2)


@pytest.mark.parametrize(("release", "spec_method", "hit"), [
    ("0.32.0", "eagle", 80),   # 96 matched, the last block given back
    ("0.33.0", "eagle", 96),   # hashes cover the next token: nothing given back
    ("0.32.0", "ngram", 96),
])
def test_a_resent_prompt_hits(release: str, spec_method: str, hit: int) -> None:
    scheduler = _scheduler(release, spec_method)
    scheduler.add_request(_request(scheduler, "a"))
    step(scheduler)
    scheduler.add_request(_request(scheduler, "b"))
    output, _ = step(scheduler)
    assert output.scheduled_new_reqs[0].num_computed_tokens == hit


def test_lookahead_hashes_only_for_eagle_from_033_without_a_connector() -> None:
    assert _scheduler("0.33.0").scheduler_config.num_hash_lookahead_tokens == 1
    assert not _scheduler("0.33.0").scheduler_config.use_eagle_block_drop
    assert _scheduler("0.32.0").scheduler_config.num_hash_lookahead_tokens == 0
    assert _scheduler("0.32.0").scheduler_config.use_eagle_block_drop
    assert _scheduler("0.33.0", "ngram").scheduler_config.num_hash_lookahead_tokens == 0


def test_eagle_with_chunked_local_attention_is_refused_with_the_group_named() -> None:
    """Upstream refuses EAGLE beside chunked local attention at the first lookup; beside mamba
    it runs (`tests/sched/test_eagle_mamba.py`)."""
    from impl.core.specs import ChunkedLocalAttentionSpec
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=256, max_model_len=512,
                             num_spec_tokens=2, spec_method="eagle")
    kv_config = KVCacheConfig(40, (KVCacheGroupSpec(("full",), FullAttentionSpec(16)),
                                   KVCacheGroupSpec(("c",), ChunkedLocalAttentionSpec(
                                       16, attention_chunk_size=64))))
    with pytest.raises(ValueError,
                       match=r"kv_cache_groups\[1\]: ChunkedLocalAttentionSpec with an EAGLE"):
        Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=False)
    with pytest.raises(ValueError, match="spec_method: must be 'ngram', 'eagle' or 'mtp'"):
        SchedulerConfig(1, 1, 1, spec_method="medusa")


@pytest.mark.parametrize(("release", "b_tokens"), [("0.32.0", 24), ("0.33.0", 25)])
def test_a_chunk_cut_for_the_encoder_keeps_the_drafters_token_off_the_item_in_032(
        release: str, b_tokens: int) -> None:
    """The chunk-cut test of `test_multimodal.py` with an EAGLE drafter: `b`'s item (at 25)
    does not fit the budget; 0.32 stops b's chunk one token earlier, where the drafter's
    token is not on the item either; 0.33 stops just before the item."""
    from impl.core.multimodal import MultiModalFeature
    from tests.sched.helpers import make_request, make_scheduler, scheduled

    s = make_scheduler(max_num_encoder_input_tokens=40, encoder_cache_size=128,
                       num_spec_tokens=2, num_lookahead_tokens=2, spec_method="eagle",
                       behaviour=behaviour_for(release))
    s.add_request(make_request("a", range(100, 140),
                               mm_features=[MultiModalFeature("img-a", 0, 30)]))
    s.add_request(make_request("b", range(300, 360),
                               mm_features=[MultiModalFeature("img-b", 25, 30)]))
    out, _ = step(s)
    assert out.scheduled_encoder_inputs == {"a": [0]}
    assert scheduled(out) == {"a": 40, "b": b_tokens}


def test_the_drafters_token_chooses_an_item_one_token_early() -> None:
    """A chunk ending just before an item: with the drafter's token the item is encoded in
    this step (the drafter reads its first placeholder)."""
    from impl.core.multimodal import MultiModalFeature
    from tests.sched.helpers import make_request, make_scheduler

    for method, encoded in (("ngram", {}), ("eagle", {"a": [0]})):
        s = make_scheduler(max_num_encoder_input_tokens=64, encoder_cache_size=128,
                           max_num_batched_tokens=32, num_spec_tokens=2,
                           num_lookahead_tokens=2, spec_method=method)
        s.add_request(make_request("a", range(100, 164),
                                   mm_features=[MultiModalFeature("img", 32, 16)]))
        out, _ = step(s)
        assert out.scheduled_encoder_inputs == encoded
