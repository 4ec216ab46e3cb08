"""Incremental block hashing of a request's tokens (prompt and, as they arrive, outputs)."""

from __future__ import annotations

from typing import Any, Protocol

from impl.core.block import BlockHash
from impl.core.hashing import (
    CBOR_HASH_FUNCTIONS,
    SHA256_HASH_FUNCTIONS,
    get_hash_fn_by_name,
    sha256_digest,
    xxhash_digest,
)
from impl.core.token_runs import DIRECT, cbor_block, pickle_block


class HashableRequest(Protocol):
    @property
    def all_token_ids(self) -> list[int]: ...
    @property
    def block_hashes(self) -> list[BlockHash]: ...
    @property
    def lora_name(self) -> str | None: ...
    @property
    def lora_path(self) -> str | None: ...
    @property
    def cache_salt(self) -> str | None: ...


class RequestBlockHasher:
    """Computes the hashes of a request's newly completed hash blocks.

    Extra keys make equal tokens hash differently when their KV differs: a LoRA adapter (name
    and path, on every block) and the cache salt (on the first block only: chaining carries it
    to every later block). Keys are tagged tuples so different kinds can never collide.
    """

    __slots__ = ("hash_block_size", "_hash_fn", "none_hash", "_cbor", "_sha256")

    def __init__(self, hash_block_size: int, hash_name: str, none_hash: BlockHash) -> None:
        if hash_block_size < 1:
            raise ValueError(f"hash_block_size: must be >= 1 (got {hash_block_size})")
        self.hash_block_size = hash_block_size
        self._hash_fn = get_hash_fn_by_name(hash_name)
        # What `_hash_direct` writes and digests (called directly: compiled, a call through
        # a stored function would cost more than the encoding of a 16-token block).
        self._cbor = hash_name in CBOR_HASH_FUNCTIONS
        self._sha256 = hash_name in SHA256_HASH_FUNCTIONS
        self.none_hash = none_hash

    def extra_keys(self, request: HashableRequest, start: int) -> tuple[Any, ...] | None:
        keys: list[tuple[str, ...]] = []
        if request.lora_name is not None:
            keys.append(("lora", request.lora_name, request.lora_path or ""))
        if start == 0 and request.cache_salt is not None:
            keys.append(("cache_salt", request.cache_salt))
        return tuple(keys) if keys else None

    def __call__(self, request: HashableRequest) -> list[BlockHash]:
        size = self.hash_block_size
        hashes = request.block_hashes
        tokens = request.all_token_ids
        start = len(hashes) * size
        parent = hashes[-1] if hashes else self.none_hash
        plain = request.lora_name is None and request.cache_salt is None
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
