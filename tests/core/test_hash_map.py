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
