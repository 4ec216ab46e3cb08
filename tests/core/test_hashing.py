import hashlib
import pickle

import pytest

from impl.core.hashing import (
    DEFAULT_NONE_HASH_SEED,
    get_hash_fn_by_name,
    hash_block_tokens,
    hashes_at_block_size,
    make_none_hash,
    resolve_none_hash_seed,
)
from impl.core.request_hasher import RequestBlockHasher
from impl.sched.request import Request


def test_sha256_is_sha256_of_the_highest_protocol_pickle() -> None:
    value = (b"parent", (1, 2, 3), None)
    expected = hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()
    assert get_hash_fn_by_name("sha256")(value) == expected


@pytest.mark.parametrize("name", ["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"])
def test_hash_functions_are_deterministic_and_distinguish_inputs(name: str) -> None:
    fn = get_hash_fn_by_name(name)
    assert fn((b"p", (1, 2), None)) == fn((b"p", (1, 2), None))
    assert fn((b"p", (1, 2), None)) != fn((b"p", (2, 1), None))


def test_unknown_hash_name_names_the_field() -> None:
    with pytest.raises(ValueError, match="prefix_caching_hash_algo: unknown hash function 'md5'"
                       r".*known: sha256, sha256_cbor, xxhash, xxhash_cbor"):
        get_hash_fn_by_name("md5")


def test_none_hash_seed_rule() -> None:
    assert resolve_none_hash_seed("sha256", "42") == "42"
    assert resolve_none_hash_seed("sha256_cbor", None) == DEFAULT_NONE_HASH_SEED
    random_a = resolve_none_hash_seed("xxhash", None)
    assert random_a != resolve_none_hash_seed("xxhash", None) and len(random_a) == 64
    assert make_none_hash("sha256", None) == get_hash_fn_by_name("sha256")(DEFAULT_NONE_HASH_SEED)


def test_block_hashes_are_chained() -> None:
    fn = get_hash_fn_by_name("sha256")
    none = make_none_hash("sha256", "0")
    hasher = RequestBlockHasher(4, "sha256", none)
    request = Request("r", range(9), block_hasher=hasher)
    first = hash_block_tokens(fn, none, [0, 1, 2, 3])
    assert request.block_hashes == [first, hash_block_tokens(fn, first, [4, 5, 6, 7])]
    request.append_output_token_ids([9, 10, 11])
    assert len(request.block_hashes) == 3


def test_cache_salt_only_on_the_first_block_and_lora_on_every_block() -> None:
    hasher = RequestBlockHasher(4, "sha256", make_none_hash("sha256", "0"))
    request = Request("r", range(8), cache_salt="s", lora_name="a", lora_path="/p",
                      block_hasher=hasher)
    assert hasher.extra_keys(request, 0) == (("lora", "a", "/p"), ("cache_salt", "s"))
    assert hasher.extra_keys(request, 4) == (("lora", "a", "/p"),)
    plain = Request("q", range(8), block_hasher=hasher)
    assert plain.block_hashes[0] != request.block_hashes[0]
    no_path = Request("n", range(8), lora_name="a", block_hasher=hasher)
    assert hasher.extra_keys(no_path, 0) == (("lora", "a", ""),)


def test_a_hash_block_of_one_token_is_allowed() -> None:
    hasher = RequestBlockHasher(1, "sha256", make_none_hash("sha256", "0"))
    assert len(Request("r", range(3), block_hasher=hasher).block_hashes) == 3
    with pytest.raises(ValueError, match="hash_block_size: must be >= 1"):
        RequestBlockHasher(0, "sha256", make_none_hash("sha256", "0"))


def test_coarser_block_size_uses_the_last_sub_block_hash() -> None:
    view = hashes_at_block_size([b"A", b"B", b"C", b"D", b"E"], 16, 32)
    assert len(view) == 2 and list(view) == [b"B", b"D"]
    assert hashes_at_block_size([b"A"], 16, 16) == [b"A"]


@pytest.mark.parametrize("name", ["sha256", "xxhash_cbor"])
def test_lookahead_hashes_cover_the_next_token_and_wait_for_it(name: str) -> None:
    """`lookahead` 1 (an EAGLE drafter, vLLM 0.33): block i's hash is that of (parent, its
    tokens, (its keys, the token after it)), made only once that token exists."""
    fn = get_hash_fn_by_name(name)
    none_hash = make_none_hash(name, "0")
    hasher = RequestBlockHasher(4, name, none_hash, lookahead=1)
    request = Request("r", range(10, 18), block_hasher=hasher)  # 8 tokens: 2 full blocks
    first = fn((none_hash, (10, 11, 12, 13), (None, 14)))
    assert request.block_hashes == [first]  # block 1 waits for token 8
    request.append_output_token(99)
    assert request.block_hashes == [first, fn((first, (14, 15, 16, 17), (None, 99)))]
    legacy = RequestBlockHasher(4, name, none_hash)
    assert Request("r", range(10, 18), block_hasher=legacy).block_hashes[0] != first
    with pytest.raises(ValueError, match="lookahead: must be >= 0"):
        RequestBlockHasher(4, name, none_hash, lookahead=-1)
