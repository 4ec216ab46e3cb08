"""The block-aligned prefill split of mamba 'align' (`impl.sched.mamba_split`): each rule of the
clip with exact chunk lengths, and admission stopping at a zero-token clip."""

from __future__ import annotations

from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from impl.sched.config import SchedulerConfig
from impl.sched.mamba_split import MambaAlignedSplit
from impl.sched.request import Request
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, make_request, scheduled, step

SPLIT = MambaAlignedSplit(block_size=16, max_chunk_tokens=64)


def request(num_prompt: int, computed: int = 0, outputs: int = 0, junction: int = 0) -> Request:
    r = Request("r", range(num_prompt))
    r.append_output_token_ids(list(range(outputs)))
    r.num_computed_tokens = computed
    r.shared_prefix_boundary = junction
    return r


def test_decode_and_the_last_prefill_chunk_are_left_alone() -> None:
    assert SPLIT.clip(request(40, computed=40, outputs=1), 1) == 1
    assert SPLIT.clip(request(40, computed=32), 8) == 8  # ends the prompt; 32 is its start


def test_a_mid_prefill_chunk_ends_on_a_block_boundary() -> None:
    assert SPLIT.clip(request(100), 40) == 32
    assert SPLIT.clip(request(100, computed=32), 40) == 32  # 32 -> 72 becomes 32 -> 64
    # Less than a block left while a whole block would fit the cap: wait (0 tokens).
    assert SPLIT.clip(request(100, computed=32), 8) == 0


def test_blocks_wider_than_the_cap_advance_sub_block_and_realign() -> None:
    wide = MambaAlignedSplit(block_size=32, max_chunk_tokens=24)
    assert wide.clip(request(100), 24) == 24
    assert wide.clip(request(100, computed=24), 24) == 8  # rounded down to 32
    assert wide.clip(request(100, computed=32), 24) == 24


def test_the_chunk_stops_at_the_last_cacheable_state() -> None:
    """The last block boundary before the final token: the state a resend can hit."""
    assert SPLIT.clip(request(40), 64) == 32
    assert SPLIT.clip(request(48), 64) == 32  # 47 // 16 * 16: a whole-block prompt too
    assert SPLIT.clip(request(17), 64) == 16


def test_a_chunk_started_mid_block_stops_at_the_next_boundary() -> None:
    assert SPLIT.clip(request(60, computed=4), 56) == 12  # 16, before the last state 48


def test_the_chunk_stops_at_the_shared_prefix_junction() -> None:
    assert SPLIT.clip(request(120, computed=64, junction=80), 56) == 16
    # A junction not inside the chunk, or less than a block past its start, changes nothing.
    assert SPLIT.clip(request(120, computed=64, junction=130), 56) == 48
    assert SPLIT.clip(request(120, computed=64, junction=70), 56) == 48


def test_a_resumed_request_replays_its_outputs_as_prefill() -> None:
    """Prompt 20 + 35 outputs: prefill runs to 54, so a 40-token chunk is rounded to 32."""
    assert SPLIT.clip(request(20, outputs=35), 40) == 32
    assert SPLIT.clip(request(20, computed=32, outputs=35), 40) == 16  # last state 48


def test_a_resumed_request_s_last_replayed_token_is_still_prefill() -> None:
    """Prompt 10 + 3 outputs: prefill runs to 12 (every token but the last), so a chunk from
    11 is still clipped (to the boundary 12) rather than left alone as a decode."""
    split = MambaAlignedSplit(block_size=4, max_chunk_tokens=64)
    assert split.clip(request(10, computed=11, outputs=3), 2) == 1
    assert split.clip(request(10, computed=12, outputs=3), 1) == 1


def test_a_block_as_wide_as_the_cap_waits_for_a_whole_block() -> None:
    """Cap 16 = block 16: a 10-token chunk left in the budget cannot end on a boundary, but a
    whole block fits the cap, so the request waits (0) instead of taking a sub-block chunk."""
    exact = MambaAlignedSplit(block_size=16, max_chunk_tokens=16)
    assert exact.clip(request(40), 10) == 0
    assert exact.clip(request(40), 16) == 16


def align_config(groups_mode: str = "align") -> KVCacheConfig:
    return KVCacheConfig(64, (
        KVCacheGroupSpec(("attn",), FullAttentionSpec(block_size=16)),
        KVCacheGroupSpec(("ssm",), MambaSpec(block_size=16, mamba_cache_mode=groups_mode))))


def scheduler(**settings: int) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=40, max_model_len=256,
                             **settings)  # type: ignore[arg-type]
    return Scheduler(config, align_config(), none_hash=NONE_HASH, log_stats=False)


def test_with_sub_block_hits_the_chunk_stops_at_the_prompt_s_last_hash_boundary() -> None:
    """Hashes every 4 tokens: a 43-token prompt's state at 40 (inside block 2) is where a
    resend hits, so the chunk after the last block boundary (32) stops there first."""
    fine = MambaAlignedSplit(block_size=16, max_chunk_tokens=64, tail_hash_block=4)
    assert fine.clip(request(43), 64) == 32  # the last cacheable state comes first
    assert fine.clip(request(43, computed=32), 11) == 8  # 32 -> 40, then 40 -> 43
    assert fine.clip(request(43, computed=40), 3) == 3
    # A prompt ending on a hash boundary: its final token is recomputed, so the state a
    # resend hits is the one before (40 of 44).
    assert fine.clip(request(44, computed=32), 12) == 8
    # A boundary on the block grid is the last cacheable state already; without the hash
    # block set the chunk runs to the prompt's end.
    assert fine.clip(request(49, computed=32), 17) == 16
    assert SPLIT.clip(request(43, computed=32), 11) == 11


def test_setup_turns_the_tail_stop_on_with_sub_block_hits() -> None:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=40, max_model_len=256,
                             hash_block_size=4)
    built = Scheduler(config, align_config(), none_hash=NONE_HASH, log_stats=False)
    assert built.mamba_split == MambaAlignedSplit(block_size=16, max_chunk_tokens=40,
                                                  tail_hash_block=4)


def test_setup_reads_the_cap_and_is_off_without_align() -> None:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=40, max_model_len=256,
                             long_prefill_token_threshold=24)
    built = Scheduler(config, align_config(), none_hash=NONE_HASH, log_stats=False)
    assert built.mamba_split == MambaAlignedSplit(block_size=16, max_chunk_tokens=24)
    assert Scheduler(config, align_config("none"), none_hash=NONE_HASH,
                     log_stats=False).mamba_split is None


def test_admission_stops_at_a_zero_token_clip() -> None:
    """Budget 40, cap 24 while requests compete: a and b (80 tokens) take 16 each, 8 are left:
    c would get only a sub-block chunk, so admission stops there until a and b decode."""
    s = scheduler(long_prefill_token_threshold=24)
    for name, base in (("a", 100), ("b", 300)):
        s.add_request(make_request(name, range(base, base + 80), max_tokens=3, ignore_eos=True))
    out, _ = step(s)
    assert scheduled(out) == {"a": 16, "b": 16}
    s.add_request(make_request("c", range(500, 580), max_tokens=3, ignore_eos=True))
    for _ in range(4):
        out, _ = step(s)
        assert scheduled(out) == {"a": 16, "b": 16}
        assert [r.request_id for r in s.waiting] == ["c"]
    out, _ = step(s)
    assert scheduled(out) == {"a": 1, "b": 1, "c": 16}
    # a's prompt is done (80): its state at 80 (block 18) is kept for the decode, whose token
    # got a new block (22); blocks left of it were retired as a's chunks were processed.
    assert s.kv_cache_manager.get_block_ids("a")[1] == [0, 0, 0, 0, 18, 22]


EAGLE = MambaAlignedSplit(block_size=16, max_chunk_tokens=64, eagle_block_drop=True)


def test_with_eagle_the_chunk_stops_a_block_below_the_last_boundary() -> None:
    """EAGLE's hits give up their last block: the state a hit needs ends one block below the
    last boundary at or before the end (the drop itself leaves tokens to recompute)."""
    assert EAGLE.clip(request(40), 64) == 16    # not 32
    assert EAGLE.clip(request(48), 64) == 32    # a whole-block prompt: 48 - 16
    assert EAGLE.clip(request(17), 17) == 17    # no boundary below: one chunk
    # A resumed request replays its output: the boundary counts every token it has.
    assert EAGLE.clip(request(40, outputs=9), 64) == 32


def test_with_eagle_and_sub_block_hits_the_tail_stop_is_a_hash_block_lower() -> None:
    """Hashes every 4 tokens: a 42-token prompt's tail state is at 36 under EAGLE (40
    without), so a chunk from 16 stops there, past the last block stop (16)."""
    eagle = MambaAlignedSplit(16, 64, tail_hash_block=4, eagle_block_drop=True)
    plain = MambaAlignedSplit(16, 64, tail_hash_block=4)
    assert eagle.clip(request(42, computed=16), 26) == 20
    assert plain.clip(request(42, computed=16), 26) == 16  # the last block stop, 32


def test_an_eagle_scheduler_splits_so_a_resend_hits_the_state_it_needs() -> None:
    """Full attention + mamba ('align'), 0.32's EAGLE rule: a 63-token prompt runs as 32 + 31
    (not 48 + 15); the resend's full-attention hit (48) gives a block back to 32, where the
    state is."""
    from impl.behaviour import behaviour_for
    from impl.core.request_hasher import RequestBlockHasher

    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=256, max_model_len=512,
                             num_spec_tokens=2, num_lookahead_tokens=2, spec_method="eagle",
                             behaviour=behaviour_for("0.32.0"))
    kv_config = KVCacheConfig(60, (
        KVCacheGroupSpec(("f",), FullAttentionSpec(16)),
        KVCacheGroupSpec(("m",), MambaSpec(16, mamba_cache_mode="align",
                                           num_speculative_blocks=2))))
    s = Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=False)

    def prompt(request_id: str) -> Request:
        return Request(request_id, range(500, 563), max_tokens=1, eos_token_id=2,
                       block_hasher=RequestBlockHasher(16, "sha256", NONE_HASH))

    s.add_request(prompt("a"))
    output, _ = step(s)
    assert scheduled(output) == {"a": 32}
    output, _ = step(s)
    assert scheduled(output) == {"a": 31}
    s.add_request(prompt("b"))
    output, _ = step(s)
    assert output.scheduled_new_reqs[0].num_computed_tokens == 32
