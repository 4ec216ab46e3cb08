"""Incremental block hashing of a request's tokens (prompt and, as they arrive, outputs).

Three paths give the same values. The serialiser path (pickle or cbor2, then the digest) takes
any block. The direct path (`impl.core.token_runs`, compiled with mypyc) writes a block's bytes
itself. The compiled build's C extension (`impl/core/native/blockhash.c`, imported when the
build has it) writes and digests a whole run of blocks in one call. Each faster path declines
what it does not model and hands the rest to the next one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import xxhash

from impl.core.block import BlockHash
from impl.core.hashing import (
    CBOR_HASH_FUNCTIONS,
    SHA256_HASH_FUNCTIONS,
    get_hash_fn_by_name,
    sha256_digest,
    xxhash_digest,
)
from impl.core.multimodal import MultiModalFeature, mm_hash_keys
from impl.core.token_runs import DIRECT, cbor_block, pickle_block

NativeHashBlocks = Callable[[bytes, list[int] | tuple[int, ...], int, int, bool,
                             Callable[[bytes], bytes] | None], list[bytes]]


def _native_hash_blocks() -> NativeHashBlocks | None:
    """The compiled build's C `hash_blocks`, or None (the pure twin, or a build without it)."""
    try:
        from impl.core._blockhash import hash_blocks
    except ImportError:
        return None
    return hash_blocks


NATIVE: Final = _native_hash_blocks()


class HashableRequest(Protocol):
    @property
    def all_token_ids(self) -> list[int]: ...
    def tokens_from(self, start: int) -> list[int] | tuple[int, ...]: ...
    @property
    def block_hashes(self) -> list[BlockHash]: ...
    @property
    def lora_name(self) -> str | None: ...
    @property
    def lora_path(self) -> str | None: ...
    @property
    def cache_salt(self) -> str | None: ...
    @property
    def mm_features(self) -> Sequence[MultiModalFeature]: ...


class RequestBlockHasher:
    """Computes the hashes of a request's newly completed hash blocks.

    Extra keys make equal tokens hash differently when their KV differs: a LoRA adapter (name
    and path, on every block), the multimodal items a block's placeholders show (identifier
    and offset, `impl.core.multimodal.mm_hash_keys`) and the cache salt (on the first block
    only: chaining carries it to every later block). Keys are tagged tuples so different kinds
    can never collide.

    `lookahead` L > 0 (an EAGLE drafter from vLLM 0.33): each hash also covers the L tokens
    after its block, which the drafter's KV at the block's last position depends on, so a
    block is hashed only once they exist; its extra keys become (keys of the block and those
    tokens, *those tokens). Such blocks take the serialiser path.
    """

    __slots__ = ("hash_block_size", "_hash_fn", "none_hash", "_cbor", "_sha256", "_native",
                 "_native_digest", "lookahead")

    def __init__(self, hash_block_size: int, hash_name: str, none_hash: BlockHash,
                 lookahead: int = 0) -> None:
        if hash_block_size < 1:
            raise ValueError(f"hash_block_size: must be >= 1 (got {hash_block_size})")
        if lookahead < 0:
            raise ValueError(f"lookahead: must be >= 0 (got {lookahead})")
        self.hash_block_size = hash_block_size
        self.lookahead = lookahead
        self._hash_fn = get_hash_fn_by_name(hash_name)
        # What `_hash_direct` writes and digests (called directly: compiled, a call through
        # a stored function would cost more than the encoding of a 16-token block).
        self._cbor = hash_name in CBOR_HASH_FUNCTIONS
        self._sha256 = hash_name in SHA256_HASH_FUNCTIONS
        self._native = NATIVE
        # The C path digests SHA-256 itself and XXH3-128 through this.
        self._native_digest: Callable[[bytes], bytes] | None = (
            None if self._sha256 else xxhash.xxh3_128_digest)
        self.none_hash = none_hash

    def extra_keys(self, request: HashableRequest, start: int,
                   end: int | None = None) -> tuple[Any, ...] | None:
        """The keys of tokens [start, end) (default: the hash block at `start`)."""
        keys: list[tuple[Any, ...]] = []
        if request.lora_name is not None:
            keys.append(("lora", request.lora_name, request.lora_path or ""))
        if request.mm_features:
            keys.extend(mm_hash_keys(request.mm_features, start,
                                     start + self.hash_block_size if end is None else end))
        if start == 0 and request.cache_salt is not None:
            keys.append(("cache_salt", request.cache_salt))
        return tuple(keys) if keys else None

    def __call__(self, request: HashableRequest) -> list[BlockHash]:
        size = self.hash_block_size
        hashes = request.block_hashes
        start = len(hashes) * size
        parent = hashes[-1] if hashes else self.none_hash
        plain = (request.lora_name is None and request.cache_salt is None
                 and not request.mm_features)
        if self.lookahead:
            return self._hash_with_lookahead(request, parent, start)
        if plain and self._native is not None:
            return self._hash_native(self._native, parent, request, start)
        tokens = request.all_token_ids
        if plain and DIRECT:
            return self._hash_direct(parent, tokens, start)
        hash_fn = self._hash_fn
        new: list[BlockHash] = []
        while start + size <= len(tokens):
            extra = None if plain else self.extra_keys(request, start)
            parent = hash_fn((parent, tuple(tokens[start : start + size]), extra))
            new.append(parent)
            start += size
        return new

    def _hash_with_lookahead(self, request: HashableRequest, parent: BlockHash,
                             start: int) -> list[BlockHash]:
        """Blocks whose `lookahead` next tokens exist, each keyed with them too."""
        size, ahead, hash_fn = self.hash_block_size, self.lookahead, self._hash_fn
        tokens = request.all_token_ids
        new: list[BlockHash] = []
        while start + size + ahead <= len(tokens):
            end = start + size
            following = tokens[end:end + ahead]
            extra = (self.extra_keys(request, start, end + ahead), *following)
            parent = hash_fn((parent, tuple(tokens[start:end]), extra))
            new.append(parent)
            start = end
        return new

    def _hash_native(self, native: NativeHashBlocks, parent: BlockHash,
                     request: HashableRequest, start: int) -> list[BlockHash]:
        """Blocks without extra keys, written and digested by the C extension from the
        request's tokens `start:` (the prompt tuple itself for a new prompt: no token list is
        built); where it stops (a block it does not model), the direct path goes on."""
        size = self.hash_block_size
        tokens = request.tokens_from(start)
        new = native(parent, tokens, 0, size, self._cbor, self._native_digest)
        done = len(new) * size
        if done + size > len(tokens):
            return new  # every full block
        new.extend(self._hash_direct(new[-1] if new else parent, request.all_token_ids,
                                     start + done))
        return new

    def _hash_direct(self, parent: BlockHash, tokens: list[int], start: int) -> list[BlockHash]:
        """Blocks without extra keys, each serialised by `impl.core.token_runs` (compiled: no
        tuple, no serialiser call); a block it does not encode goes through the hash function."""
        size = self.hash_block_size
        cbor, sha, hash_fn = self._cbor, self._sha256, self._hash_fn
        new: list[BlockHash] = []
        while start + size <= len(tokens):
            end = start + size
            serialised = (cbor_block(parent, tokens, start, end) if cbor
                          else pickle_block(parent, tokens, start, end))
            if serialised is None:
                parent = hash_fn((parent, tuple(tokens[start:end]), None))
            elif sha:
                parent = sha256_digest(serialised)
            else:
                parent = xxhash_digest(serialised)
            new.append(parent)
            start = end
        return new
