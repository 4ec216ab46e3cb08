"""An EAGLE drafter beside a KV connector: both releases keep the block drop (0.33 hashes a
block with the token after it only without a connector), a CPU-tier hit gives up its last block
as a GPU hit does, and 0.33 keeps the block below a shared prefix's junction reachable under
sparse retention (`Behaviour.eagle_junction_block_below`)."""

from __future__ import annotations

import pytest

from impl.behaviour import behaviour_for
from impl.connector.types import KVConnectorOutput, OffloadSettings
from impl.core.request_hasher import RequestBlockHasher
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from impl.sched.config import SchedulerConfig
from impl.sched.request import Request
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH
from tests.sched.offload_helpers import run_step, stores_done

RELEASES = ("0.32.0", "0.33.0")


def eagle_offload_scheduler(release: str, num_blocks: int = 10) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=256, max_model_len=256,
                             num_spec_tokens=2, num_lookahead_tokens=2, spec_method="eagle",
                             behaviour=behaviour_for(release),
                             kv_connector=OffloadSettings(32, False, "fail"))
    kv_config = KVCacheConfig(num_blocks, (KVCacheGroupSpec(("full",), FullAttentionSpec(16)),))
    return Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=True)


def request(scheduler: Scheduler, request_id: str, prompt: range) -> Request:
    hasher = RequestBlockHasher(16, "sha256", NONE_HASH,
                                lookahead=scheduler.scheduler_config.num_hash_lookahead_tokens)
    return Request(request_id, prompt, block_hasher=hasher, max_tokens=1, eos_token_id=2)


@pytest.mark.parametrize("release", RELEASES)
def test_with_a_connector_both_releases_keep_the_block_drop(release: str) -> None:
    config = eagle_offload_scheduler(release).scheduler_config
    assert config.num_hash_lookahead_tokens == 0
    assert config.use_eagle_block_drop


@pytest.mark.parametrize("release", RELEASES)
def test_a_cpu_hit_gives_up_its_last_block(release: str) -> None:
    """a's 100-token prompt (6 whole blocks) reaches the CPU tier, a filler evicts it from the
    GPU, and b sends it again: b loads 5 blocks (80 tokens), not 6, as a GPU hit would drop
    the block the drafter's token was written into."""
    scheduler = eagle_offload_scheduler(release)
    report: KVConnectorOutput | None = None
    for name, prompt in (("a", range(1000, 1100)), ("filler", range(2000, 2100))):
        scheduler.add_request(request(scheduler, name, prompt))
        for _ in range(3):
            _, meta = run_step(scheduler, report)
            report = stores_done(meta.store_event) if meta.store_event >= 0 else None
    scheduler.add_request(request(scheduler, "b", range(1000, 1100)))
    _, meta = run_step(scheduler, report)
    assert (meta.load_gpu_blocks, meta.load_cpu_blocks) == ([4, 5, 6, 7, 8], [1, 2, 3, 4, 5])
    assert scheduler.requests["b"].num_computed_tokens == 80


@pytest.mark.parametrize(("release", "extra"), [("0.32.0", ()), ("0.33.0", (32,))])
def test_033_keeps_the_block_below_a_junction_reachable(release: str,
                                                        extra: tuple[int, ...]) -> None:
    """A 100-token prompt whose lookup found a shared prefix up to 48 tokens: the reachable
    boundaries are a block below the resend's and the sibling's (80), the junction (48) and,
    in 0.33, the block below the junction (32)."""
    scheduler = eagle_offload_scheduler(release)
    manager = scheduler.kv_cache_manager.coordinator.managers[0]
    a = request(scheduler, "a", range(1000, 1100))
    a.shared_prefix_boundary = 48
    assert manager.reachable_boundaries(a) == (80, 48, *extra)
