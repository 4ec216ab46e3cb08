"""Chained block hashing: the identity of a full block is its tokens *and* everything before it.

hash(block i) = H((hash(block i-1), tokens of block i, extra keys)), with a per-process seed
(`none_hash`) standing in for the parent of block 0. Chaining means a cache miss at block i
implies a miss at every later block, so a prefix lookup can stop at its first miss. The four hash
functions serialise that triple with pickle or canonical CBOR and digest it with SHA-256 or
XXH3-128; values are bit-identical to upstream vLLM's for the same seed.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import cbor2
import xxhash

from impl.core.block import BlockHash

HashFunction = Callable[[Any], bytes]

_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


def sha256_digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def xxhash_digest(data: bytes) -> bytes:
    return xxhash.xxh3_128_digest(data)


def sha256(value: Any) -> bytes:
    return sha256_digest(pickle.dumps(value, protocol=_PICKLE_PROTOCOL))


def sha256_cbor(value: Any) -> bytes:
    return sha256_digest(cbor2.dumps(value, canonical=True))


def xxhash_pickle(value: Any) -> bytes:
    return xxhash_digest(pickle.dumps(value, protocol=_PICKLE_PROTOCOL))


def xxhash_cbor(value: Any) -> bytes:
    return xxhash_digest(cbor2.dumps(value, canonical=True))


HASH_FUNCTIONS: dict[str, HashFunction] = {
    "sha256": sha256,
    "sha256_cbor": sha256_cbor,
    "xxhash": xxhash_pickle,
    "xxhash_cbor": xxhash_cbor,
}
CBOR_HASH_FUNCTIONS = frozenset({"sha256_cbor", "xxhash_cbor"})
SHA256_HASH_FUNCTIONS = frozenset({"sha256", "sha256_cbor"})
"""How each function serialises (CBOR, else pickle) and digests (SHA-256, else XXH3-128): the
request hasher's direct path writes the same bytes itself (`impl.core.token_runs`)."""


def get_hash_fn_by_name(name: str) -> HashFunction:
    try:
        return HASH_FUNCTIONS[name]
    except KeyError:
        known = ", ".join(sorted(HASH_FUNCTIONS))
        raise ValueError(f"prefix_caching_hash_algo: unknown hash function {name!r} "
                         f"(known: {known})") from None


#: Seed of the first block's parent hash for cryptographic hash functions when no
#: PYTHONHASHSEED is set: fixed, so hashes are shareable across processes.
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
CRYPTOGRAPHIC_HASH_FUNCTIONS = frozenset({"sha256", "sha256_cbor"})


def resolve_none_hash_seed(hash_name: str, env_seed: str | None) -> str:
    """The seed the first block's parent hash derives from.

    An explicit seed (PYTHONHASHSEED) wins. Otherwise cryptographic functions use a fixed seed
    (hashes can be shared between processes), and XXH3, which is not collision resistant, a
    random one: an attacker must not be able to predict block hashes and plant collisions.
    """
    if env_seed is not None:
        return env_seed
    if hash_name in CRYPTOGRAPHIC_HASH_FUNCTIONS:
        return DEFAULT_NONE_HASH_SEED
    return os.urandom(32).hex()


def make_none_hash(hash_name: str, env_seed: str | None) -> BlockHash:
    """hash_fn(seed): the parent hash of every first block."""
    return get_hash_fn_by_name(hash_name)(resolve_none_hash_seed(hash_name, env_seed))


def none_hash_from_env(hash_name: str) -> BlockHash:
    return make_none_hash(hash_name, os.environ.get("PYTHONHASHSEED"))


def hash_block_tokens(
    hash_fn: HashFunction,
    parent_block_hash: BlockHash,
    block_token_ids: Sequence[int],
    extra_keys: tuple[Any, ...] | None = None,
) -> BlockHash:
    return hash_fn((parent_block_hash, tuple(block_token_ids), extra_keys))


class BlockHashesAtBlockSize(Sequence[BlockHash]):
    """A lazy view of chained hashes at `block_size`, a multiple of the hash block size.

    Each chained hash already fingerprints its whole prefix, so block i of the coarser size is
    identified by the hash at its last sub-block boundary: entry (i + 1) * ratio - 1.
    """

    __slots__ = ("_hashes", "_ratio")

    def __init__(self, hashes: Sequence[BlockHash], ratio: int) -> None:
        self._hashes = hashes
        self._ratio = ratio

    def __len__(self) -> int:
        return len(self._hashes) // self._ratio

    def __getitem__(self, index: int) -> BlockHash:  # type: ignore[override]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._hashes[(index + 1) * self._ratio - 1]


def hashes_at_block_size(
    hashes: Sequence[BlockHash], hash_block_size: int, block_size: int
) -> Sequence[BlockHash]:
    if block_size == hash_block_size:
        return hashes
    return BlockHashesAtBlockSize(hashes, block_size // hash_block_size)
