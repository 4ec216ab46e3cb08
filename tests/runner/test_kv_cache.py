"""KV-cache allocation follows the hybrid layout: one buffer per layer position, shared by one
layer of each group, block ids indexing pages."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")

from impl.core.specs import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from impl.runner.config import parse_model_config  # noqa: E402
from impl.runner.kv_cache import (  # noqa: E402
    allocate_kv_caches,
    check_model_layers,
    model_kv_cache_config,
)

CPU = torch.device("cpu")
FULL = FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8)
SLIDING = SlidingWindowSpec(block_size=4, num_kv_heads=2, head_size=8, sliding_window=8)


def _hybrid() -> KVCacheConfig:
    """The design's example in small: full.0-2 in group 0, sw.0-2 and sw.3-5 in groups 1, 2."""
    return KVCacheConfig(10, (
        KVCacheGroupSpec(("full.0", "full.1", "full.2"), FULL),
        KVCacheGroupSpec(("sw.0", "sw.1", "sw.2"), SLIDING),
        KVCacheGroupSpec(("sw.3", "sw.4", "sw.5"), SLIDING),
    ))


def test_one_buffer_per_layer_position_shared_across_groups() -> None:
    caches = allocate_kv_caches(_hybrid(), CPU)
    assert len(caches.buffers) == 3
    assert all(b.numel() == 10 * FULL.page_size_bytes for b in caches.buffers)
    for position in range(3):
        names = (f"full.{position}", f"sw.{position}", f"sw.{position + 3}")
        pointers = {caches.layers[n].data_ptr() for n in names}
        assert pointers == {caches.buffers[position].data_ptr()}
    assert caches.layers["full.0"].shape == (10, 2, 4, 2, 8)
    assert caches.layer_group == {"full.0": 0, "full.1": 0, "full.2": 0, "sw.0": 1, "sw.1": 1,
                                  "sw.2": 1, "sw.3": 2, "sw.4": 2, "sw.5": 2}


def test_block_id_indexes_one_page_of_every_buffer() -> None:
    caches = allocate_kv_caches(_hybrid(), CPU)
    caches.layers["sw.1"][7] = 1.0  # group 1 owns block 7: write its page of buffer 1
    page = FULL.page_size_bytes
    raw = caches.buffers[1].view(torch.uint8)
    touched = (raw != 0).nonzero().flatten()
    assert int(touched.min()) >= 7 * page and int(touched.max()) < 8 * page
    assert bool((caches.layers["full.1"][7] == 1.0).all())  # same page, other group's view
    assert bool((caches.layers["full.1"][6] == 0).all())
    assert not any(bool(b.any()) for i, b in enumerate(caches.buffers) if i != 1)


def test_groups_of_unequal_size_share_the_first_buffers() -> None:
    config = KVCacheConfig(4, (KVCacheGroupSpec(("a", "b"), FULL),
                               KVCacheGroupSpec(("c",), SLIDING)))
    caches = allocate_kv_caches(config, CPU)
    assert len(caches.buffers) == 2
    assert caches.layers["c"].data_ptr() == caches.layers["a"].data_ptr()


def test_pages_are_head_major_under_the_token_major_view() -> None:
    """Within a page, one KV head's vectors for consecutive tokens are adjacent in memory
    (the tiles the CPU kernel copies whole), while every layer's view indexes
    [block, K/V, token, head, dim]."""
    caches = allocate_kv_caches(_hybrid(), CPU)
    layer = caches.layers["full.0"]  # [10, 2, 4 tokens, 2 heads, 8]
    assert layer.stride() == (2 * 2 * 4 * 8, 2 * 4 * 8, 8, 4 * 8, 1)
    layer[3, 1, 2, 1] = 5.0  # block 3, V, token 2, head 1
    flat = caches.buffers[0].view(torch.float32)
    offset = ((3 * 2 + 1) * 2 + 1) * 4 * 8 + 2 * 8  # (block, V, head) tile, then token 2
    assert bool((flat[offset:offset + 8] == 5.0).all())
    assert int((flat != 0).sum()) == 8


def test_refuses_mismatched_page_sizes_and_mamba() -> None:
    other = FullAttentionSpec(block_size=8, num_kv_heads=2, head_size=8)
    with pytest.raises(ValueError, match="page sizes differ"):
        allocate_kv_caches(KVCacheConfig(4, (KVCacheGroupSpec(("a",), FULL),
                                             KVCacheGroupSpec(("b",), other))), CPU)
    with pytest.raises(ValueError, match=r"kv_cache_groups\[0\]: MambaSpec is not supported"):
        allocate_kv_caches(KVCacheConfig(4, (KVCacheGroupSpec(("a",), MambaSpec(4)),)), CPU)
    with pytest.raises(ValueError, match="already in group 0"):
        allocate_kv_caches(KVCacheConfig(4, (KVCacheGroupSpec(("a",), FULL),
                                             KVCacheGroupSpec(("a",), FULL))), CPU)


def test_model_config_gives_one_full_attention_group() -> None:
    model = parse_model_config({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 16,
        "intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2})
    config = model_kv_cache_config(model, num_blocks=5, block_size=16)
    (group,) = config.kv_cache_groups
    assert group.layer_names == tuple(f"model.layers.{i}.self_attn.attn" for i in range(3))
    assert group.kv_cache_spec == FullAttentionSpec(16, num_kv_heads=2, head_size=4)
    check_model_layers(config, model)
    with pytest.raises(ValueError, match="no group holds layer 'model.layers.2.self_attn.attn'"):
        check_model_layers(KVCacheConfig(5, (KVCacheGroupSpec(
            group.layer_names[:2], group.kv_cache_spec),)), model)
