"""The prefetch hint (`impl/core/native/prefetch.c`) changes nothing, takes only what it
documents, and the pool asks for the stretches it says.

The extension is built here by the compiled build's own step (`compile_native`), as the block
hasher's tests do, so the tests session checks the C code while its twin runs pure; without a
C compiler or Python headers the tests skip, naming what is missing.
"""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

import impl.core.block_pool as block_pool
from impl.compiled import active_build
from impl.core.block import KVCacheBlock
from impl.core.block_pool import PREFETCH_AHEAD, BlockPool
from tests.core.helpers import build_native, require_compiled_native

NAME = "impl.core._prefetch"


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return build_native(NAME, tmp_path_factory.mktemp("prefetch"))


def test_prefetch_changes_no_object_and_no_reference_count(native: ModuleType) -> None:
    blocks = [KVCacheBlock(i) for i in range(40)]
    before = [(sys.getrefcount(b), b.ref_cnt, b.prev_free, b.next_free) for b in blocks]
    for start, stop in [(0, 40), (0, 0), (-5, 3), (30, 1_000), (41, 50), (20, 10)]:
        assert native.prefetch(blocks, start, stop) is None
    assert [(sys.getrefcount(b), b.ref_cnt, b.prev_free, b.next_free) for b in blocks] == before
    assert native.prefetch([], 0, 32) is None


def test_bad_arguments_are_one_clear_error(native: ModuleType) -> None:
    with pytest.raises(TypeError, match="expected a list, got tuple"):
        native.prefetch((KVCacheBlock(1),), 0, 1)
    with pytest.raises(TypeError, match="3 arguments"):
        native.prefetch([KVCacheBlock(1)])
    with pytest.raises(TypeError):
        native.prefetch([KVCacheBlock(1)], "0", 1)


def test_touch_and_free_ask_for_each_stretch_once_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    if active_build() is not None:
        pytest.skip("the compiled pool binds PREFETCH at import; the pure twin checks the calls")
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(block_pool, "PREFETCH",
                        lambda objects, start, stop: calls.append((len(objects), start, stop)))
    pool = BlockPool(64, True, enable_kv_cache_events=False)
    blocks = pool.get_new_blocks(40)
    pool.free_blocks(list(reversed(blocks)))
    ahead = PREFETCH_AHEAD
    stretches = [(40, 0, 2 * ahead), (40, 2 * ahead, 3 * ahead), (40, 3 * ahead, 4 * ahead)]
    assert calls == stretches
    calls.clear()
    pool.touch(blocks)
    assert calls == stretches
    assert all(b.ref_cnt == 1 for b in blocks)  # the hint changed nothing the pool does


def test_the_compiled_pool_prefetches() -> None:
    require_compiled_native(NAME)
    assert block_pool.PREFETCH is not None
