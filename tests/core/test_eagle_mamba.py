"""EAGLE beside mamba 'align' at the KV level: exact lengths and block ids.

An EAGLE hit gives up its last block (one hash block with sub-block hits) on full attention;
mamba never drops, it finds the state that matches the shorter length. Hashes and blocks as
named in each test; vLLM 0.32's rule (the drop is on)."""

from __future__ import annotations

from impl.core.block_pool import BlockPool
from impl.core.coordinator import HybridKVCacheCoordinator
from impl.core.kv_cache_manager import KVCacheManager
from impl.core.lagging_hits import find_hit_per_group, lagging_hit
from impl.core.mamba_align import MambaAlignManager
from impl.core.mamba_boundaries import checkpoint_boundary
from impl.core.partial_hits import full_attention_hit
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from impl.sched.request import Request
from tests.core.helpers import make_request


def eagle_manager(block_size: int, hash_block_size: int, retention: int | None = None,
                  num_blocks: int = 40) -> KVCacheManager:
    groups = (KVCacheGroupSpec(("f",), FullAttentionSpec(block_size=block_size)),
              KVCacheGroupSpec(("m",), MambaSpec(block_size=block_size,
                                                 mamba_cache_mode="align")))
    config = KVCacheConfig(num_blocks, groups, prefix_cache_retention_interval=retention)
    return KVCacheManager(config, max_model_len=1024, hash_block_size=hash_block_size,
                          enable_caching=True, log_stats=False, use_eagle=True,
                          enable_kv_cache_events=False)


def step(manager: KVCacheManager, req: Request, num_new: int) -> None:
    manager.new_step_starts()
    assert manager.allocate_slots(req, num_new) is not None
    pairs = manager.take_block_copies()
    manager.block_pool.free_blocks([block for pair in pairs for block in pair])
    manager.check_integrity()
    req.num_computed_tokens += num_new


def mamba(manager: KVCacheManager) -> MambaAlignManager:
    group = manager.coordinator.managers[-1]
    assert isinstance(group, MambaAlignManager)
    return group


def test_the_checkpoint_boundary_sits_a_unit_lower_with_eagle() -> None:
    assert [checkpoint_boundary(n, 16, False) for n in (15, 16, 17, 63, 64)] == [0, 0, 16, 48, 48]
    assert [checkpoint_boundary(n, 16, True) for n in (15, 16, 17, 63, 64)] == [0, 0, 0, 32, 48]


def test_a_sub_block_eagle_hit_gives_up_one_hash_block() -> None:
    """Block size 8, hashes every 2 tokens (block b keyed by fine entry 4b + 3)."""
    pool = BlockPool(12, enable_caching=True, enable_kv_cache_events=False)
    blocks = {b.block_id: b for b in pool.get_new_blocks(8)}
    hashes = [bytes([fine]) * 4 for fine in range(16)]
    for fine, block_id in {3: 1, 5: 3}.items():
        pool.cache_partial_block(blocks[block_id], hashes[fine], 0, 2 * (fine + 1))
    hits, length = full_attention_hit(hashes, 64, [0], pool, 8, 2, drop_eagle=True)
    assert ([b.block_id for b in hits[0]], length) == ([1, 3], 10)  # 12 found, 2 given up
    pool.cache_partial_block(blocks[2], hashes[7], 0, 16)
    hits, length = full_attention_hit(hashes[:8], 64, [0], pool, 8, 2, drop_eagle=True)
    assert ([b.block_id for b in hits[0]], length) == ([1, 2], 14)  # 16 found: block 2 kept


def test_mamba_matches_full_attentions_hit_after_the_drop() -> None:
    """a (24 tokens; blocks of 8, hashes of 2) ran as the scheduler splits it under EAGLE:
    chunks ending at 16 (a block below its last boundary) and 22 (a hash block below its
    end): mamba states at 16 and 22. b shares a's first 16 tokens: full attention finds 16 and
    gives 2 back, and mamba has no state at 14 or below: no hit (16 without the drop). c
    extends a's 24 tokens: full attention finds 24 and gives 2 back, and mamba's state at 22
    matches (24 without the drop: a's state at 24 is keyed too)."""
    manager = eagle_manager(8, 2)
    a = make_request("a", range(24), block_size=2)
    for num_new in (16, 6, 2):
        step(manager, a, num_new)
    b = make_request("b", [*range(16), 90, 91, 92, 93], block_size=2)
    manager.new_step_starts()
    _, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 0
    c = make_request("c", [*range(24), 90, 91, 92, 93, 94, 95], block_size=2)
    hits, num_hit = manager.get_computed_blocks(c)
    assert num_hit == 22
    # Mamba: the copy of a's state at 22 (block 6: a kept writing its own block 5).
    assert hits.get_block_ids() == (manager.get_block_ids("a")[0], [0, 0, 6])


def test_sparse_retention_keeps_eagles_replay_boundary_at_the_scheduler_block() -> None:
    """Blocks of 16, hashes of 8, retention 0: a 63-token prompt's replay boundaries under
    EAGLE are at the scheduler block (48 - 16 = 32), not at the hash block (56 - 16 = 40,
    aligned to 40): the state at 32 is kept. The prompt's tail state (a hash block below its
    end: 48, a whole block the mask left unkeyed) is keyed whole when the chunk lands there."""
    manager = eagle_manager(16, 8, retention=0)
    a = make_request("a", range(63), block_size=8)
    step(manager, a, 32)
    table = mamba(manager).req_to_blocks["a"]
    assert table[1].block_hash == a.block_hashes[3]  # the state at 32
    step(manager, a, 16)
    table = mamba(manager).req_to_blocks["a"]
    assert table[2].block_hash == a.block_hashes[5]  # the state at 48, keyed whole
    assert "a" not in mamba(manager).partial_hit_reqs  # nothing to copy


def resend_after(num_tokens: int, chunks: list[int]) -> tuple[HybridKVCacheCoordinator, Request]:
    """a (`num_tokens`, blocks and hashes of 16) computed in `chunks`; b resends its prompt."""
    manager = eagle_manager(16, 16)
    a = make_request("a", range(num_tokens), block_size=16)
    for num_new in chunks:
        step(manager, a, num_new)
    coordinator = manager.coordinator
    assert isinstance(coordinator, HybridKVCacheCoordinator)
    return coordinator, make_request("b", range(num_tokens), block_size=16)


def test_a_connectors_per_group_lookup_drops_full_attentions_block_too() -> None:
    """a (63 tokens, blocks of 16) computed its first chunk (32): full attention finds 32 and
    gives a block back (16), mamba finds its state at 32, deeper than full attention: the
    agreed hit stands (no lagging hit)."""
    coordinator, b = resend_after(63, [32])
    _, lengths = find_hit_per_group(coordinator, b, 62)
    assert lengths == (16, 32)
    assert lagging_hit(coordinator, b) is None


def test_a_connectors_per_group_lookup_looks_a_block_past_before_the_drop() -> None:
    """a (64 tokens, four whole blocks) ran as 48 + 16: full attention may look at the whole
    prompt (63 + a block, capped by its 4 hashes) and gives one block back (48), so it agrees
    with mamba's state at 48 and the connector may complete from there (32 without the look
    past: mamba would then run deeper and the agreed hit would be asked instead)."""
    coordinator, b = resend_after(64, [48, 16])
    _, lengths = find_hit_per_group(coordinator, b, 63)
    assert lengths == (48, 48)
    found = lagging_hit(coordinator, b)
    assert found is not None and found[1:] == (48, False)


def test_a_sub_block_eagle_miss_stays_a_miss_and_one_token_is_given_up() -> None:
    """Nothing cached: no hit, nothing to give up (never a negative length). Hashes of one
    token: a one-token hit gives up that token."""
    pool = BlockPool(12, enable_caching=True, enable_kv_cache_events=False)
    hashes = [bytes([fine]) * 4 for fine in range(16)]
    assert full_attention_hit(hashes, 64, [0], pool, 8, 2, drop_eagle=True) == ([[]], 0)
    block = pool.get_new_blocks(1)[0]
    pool.cache_partial_block(block, hashes[0], 0, 1)
    hits, length = full_attention_hit(hashes, 64, [0], pool, 8, 1, drop_eagle=True)
    assert (hits, length) == ([[]], 0)
