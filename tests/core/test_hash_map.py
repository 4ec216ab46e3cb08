"""`BlockHashToBlockMap`: one entry per hash, duplicates kept in insertion order."""

from impl.core.block import KVCacheBlock
from impl.core.hash_map import BlockHashToBlockMap


def test_duplicates_collapse_back_to_one_entry_and_vanish_when_popped() -> None:
    index = BlockHashToBlockMap()
    first, second, other = KVCacheBlock(1), KVCacheBlock(2), KVCacheBlock(3)
    index.insert(b"h", first)
    index.insert(b"h", second)
    index.insert(b"o", other)
    assert len(index) == 2  # hashes, not blocks
    assert list(index.items()) == [(b"o", other), (b"h", first), (b"h", second)]
    assert index.pop(b"h", 9) is None  # not indexed under that hash: nothing changes
    assert len(index) == 2 and index.get_one_block(b"h") is first
    assert index.pop(b"h", 1) is first
    assert index.get_one_block(b"h") is second and len(index) == 2
    assert index.pop(b"h", 2) is second
    assert len(index) == 1 and index.get_one_block(b"h") is None
    assert list(index.hashes()) == [b"o"]
    assert index.pop(b"o", 3) is other and len(index) == 0


def test_popping_another_blocks_single_entry_keeps_it() -> None:
    """pop takes the entry out before it can compare block ids; a mismatch puts it back."""
    index = BlockHashToBlockMap()
    only = KVCacheBlock(4)
    index.insert(b"h", only)
    assert index.pop(b"h", 5) is None
    assert index.get_one_block(b"h") is only and len(index) == 1
    assert list(index.items()) == [(b"h", only)]
    assert index.pop(b"missing", 4) is None and len(index) == 1


def test_inserting_a_block_twice_under_its_hash_keeps_one_entry() -> None:
    index = BlockHashToBlockMap()
    block = KVCacheBlock(7)
    index.insert(b"h", block)
    index.insert(b"h", block)
    assert list(index.items()) == [(b"h", block)]
    assert index.pop(b"h", 7) is block and len(index) == 0
