"""Small builders shared by the core unit tests."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pytest

from impl.core.hashing import get_hash_fn_by_name, make_none_hash
from impl.core.kv_cache_manager import KVCacheManager
from impl.core.request_hasher import RequestBlockHasher
from impl.core.specs import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    SlidingWindowSpec,
)
from impl.sched.request import Request


def make_manager(num_blocks: int, *specs: KVCacheSpec, caching: bool = True,
                 hash_block_size: int | None = None, events: bool = False) -> KVCacheManager:
    specs = specs or (FullAttentionSpec(block_size=4),)
    groups = tuple(KVCacheGroupSpec((f"l{i}",), s) for i, s in enumerate(specs))
    return KVCacheManager(KVCacheConfig(num_blocks, groups), max_model_len=1024,
                          hash_block_size=hash_block_size, enable_caching=caching,
                          log_stats=True, enable_kv_cache_events=events)


def make_request(request_id: str, tokens: Iterable[int], block_size: int = 4,
                 **kwargs: object) -> Request:
    hasher = RequestBlockHasher(block_size, "sha256", make_none_hash("sha256", "0"))
    return Request(request_id, tokens, block_hasher=hasher, **kwargs)  # type: ignore[arg-type]


def admit(manager: KVCacheManager, request: Request, num_new: int | None = None,
          lookahead: int = 0) -> list[list[int]] | None:
    """What a scheduler does for a waiting request: prefix lookup, then allocation."""
    hits, num_hit = manager.get_computed_blocks(request)
    if num_new is None:
        num_new = request.num_tokens - num_hit
    blocks = manager.allocate_slots(request, num_new, num_hit, hits,
                                    num_lookahead_tokens=lookahead)
    manager.check_integrity()
    if blocks is None:
        return None
    request.num_computed_tokens = num_hit + num_new
    return [list(ids) for ids in manager.get_block_ids(request.request_id)]


__all__ = ["SlidingWindowSpec", "admit", "make_manager", "make_request"]


def reference_chain(algo: str, none_hash: bytes, tokens: list[int],
                    block_size: int) -> list[bytes]:
    """The chained hashes of every full block of `tokens`, one serialiser call each: what
    every faster hashing path must reproduce."""
    fn = get_hash_fn_by_name(algo)
    expected, parent = [], none_hash
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = fn((parent, tuple(tokens[start : start + block_size]), None))
        expected.append(parent)
    return expected


def build_native(module: str, out: Path) -> ModuleType:
    """One of the compiled build's C extensions (`impl.compiled.NATIVE_MODULES`), built into
    `out` by the build's own step and imported from there, so the tests session checks the C
    code while its twin runs pure; skips, naming why, where it cannot build."""
    from impl.compiled.build import c_compiler, compile_native

    what = f"the C extension {module}"
    missing = c_compiler()
    if missing is not None:
        pytest.skip(f"{what} cannot be built: {missing}")
    built, failed = compile_native(out, out)
    if module not in built:
        pytest.skip(f"{what} did not build: {failed.get(module)}")
    package, _, name = module.rpartition(".")
    path = next(out.joinpath(*package.split(".")).glob(f"{name}.*"))
    spec = importlib.util.spec_from_file_location(module, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def require_compiled_native(module: str) -> None:
    """Skip unless this process runs the compiled twin and its build has `module`."""
    from impl.compiled import active_build

    build = active_build()
    if build is None:
        pytest.skip("the pure twin runs here (VTWIN_COMPILED=1 runs this in the compiled step)")
    if module not in build.native:
        pytest.skip(f"the compiled build has no {module}: {build.native_missing}")
