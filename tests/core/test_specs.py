import pytest

from impl.core.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
    check_hash_block_size,
)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: FullAttentionSpec(block_size=0), "block_size"),
        (lambda: SlidingWindowSpec(block_size=16, sliding_window=0), "sliding_window"),
        (lambda: ChunkedLocalAttentionSpec(block_size=16, attention_chunk_size=0),
         "attention_chunk_size"),
        (lambda: MambaSpec(block_size=16, mamba_cache_mode="some"), "mamba_cache_mode"),
        (lambda: KVCacheConfig(num_blocks=0), "num_blocks"),
    ],
)
def test_bad_specs_name_the_field(build: object, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        build()  # type: ignore[operator]


def test_group_block_sizes_must_fit_the_hash_block_size() -> None:
    config = KVCacheConfig(10, (KVCacheGroupSpec(("a",), FullAttentionSpec(block_size=32)),
                                KVCacheGroupSpec(("b",), FullAttentionSpec(block_size=24))))
    with pytest.raises(ValueError, match=r"kv_cache_groups\[1\].block_size"):
        check_hash_block_size(config, 16)
    check_hash_block_size(config, 8)
