"""The NIXL connector on a hybrid model (`impl.connector.nixl.ExchangeClip`): full attention
beside a sliding window of 5 tokens over blocks of 4, whose exchanges keep the window's last
cdiv(5, 4) + 1 = 3 blocks. A decode-side pull lists every full-attention block and the
window's tail; a finished prefill hands on the same; push mode registers and writes the same
lists; a bounded-replay window is refused by name (mamba: `test_nixl_mamba.py`)."""

from __future__ import annotations

import pytest

from impl.connector.nixl import ExchangeClip
from impl.connector.nixl_metadata import PullOrder
from impl.connector.types import KVConnectorOutput, NixlSettings
from impl.core.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from impl.sched.config import SchedulerConfig
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH
from tests.sched.test_nixl_connector import BLOCK, decode, prefill, run_step


def hybrid(*specs: object, num_blocks: int = 40, mode: str = "pull") -> Scheduler:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                             block_size=BLOCK, kv_connector=NixlSettings("fail", mode))
    groups = tuple(KVCacheGroupSpec((f"g{i}",), spec)  # type: ignore[arg-type]
                   for i, spec in enumerate(specs))
    return Scheduler(config, KVCacheConfig(num_blocks, groups), none_hash=NONE_HASH,
                     log_stats=True)


FULL = FullAttentionSpec(BLOCK)
WINDOW = SlidingWindowSpec(BLOCK, sliding_window=5)


def test_a_pull_lists_the_windows_tail_only() -> None:
    """20 tokens loaded: full attention gets 5 blocks; the window needs only the tokens
    before token 20 it reads, so it is given one block (the others are null) and the pull
    lists that one (null padding is never pulled)."""
    scheduler = hybrid(FULL, WINDOW)
    scheduler.add_request(decode("d", range(10, 30)))
    _, meta, _ = run_step(scheduler)
    full, window = scheduler.kv_cache_manager.get_block_ids("d")
    assert (full, window) == ([1, 2, 3, 4, 5], [0, 0, 0, 0, 6])
    assert meta.reqs_to_recv == {"d": PullOrder(([1, 2, 3, 4, 5], [6]), (0, 0), True)}


def test_a_finished_prefill_hands_on_the_windows_tail_only() -> None:
    """A 20-token prefill gets blocks 1-5 and 6-10; once computed, the window's first four
    fell out of it (null). It hands on every full-attention block and the window's last
    three entries, null padding included, as upstream does."""
    scheduler = hybrid(FULL, WINDOW)
    scheduler.add_request(prefill("p", range(10, 30)))
    _, _, outputs = run_step(scheduler)
    (out,) = outputs
    assert out.kv_transfer_params is not None
    assert out.kv_transfer_params.remote_block_ids == ((1, 2, 3, 4, 5), (0, 0, 10))


def test_push_mode_registers_and_writes_the_same_lists() -> None:
    scheduler = hybrid(FULL, WINDOW, mode="push")
    scheduler.add_request(decode("d", range(10, 30)))
    scheduler.add_request(prefill("p", range(40, 60)))
    _, meta, _ = run_step(scheduler)  # d registers; p computes and finishes
    assert meta.push_registrations == {"d": ([1, 2, 3, 4, 5], [6])}
    _, meta, _ = run_step(scheduler, KVConnectorOutput(finished_recving=frozenset({"d"})))
    assert meta.push_finished_blocks == {"p": ([7, 8, 9, 10, 11], [0, 0, 16])}


def test_chunked_local_groups_exchange_every_block() -> None:
    local = ChunkedLocalAttentionSpec(BLOCK, attention_chunk_size=8)
    clip = ExchangeClip(KVCacheConfig(8, (KVCacheGroupSpec(("f",), FULL),
                                          KVCacheGroupSpec(("l",), local))))
    assert clip.clip(([1, 2, 3, 4], [5, 6, 7, 8])) == ([1, 2, 3, 4], [5, 6, 7, 8])
    only_full = ExchangeClip(KVCacheConfig(8, (KVCacheGroupSpec(("f",), FULL),)))
    assert not only_full.hybrid


def test_a_bounded_replay_window_is_refused_by_name() -> None:
    replay = SlidingWindowSpec(BLOCK, sliding_window=8, bounded_replay=True)
    with pytest.raises(ValueError, match=r"'nixl' connector with a sliding_window_8_replay "
                                         r"group \(group 1\)"):
        hybrid(FULL, replay)
