"""The C block hasher (`impl/core/native/blockhash.c`) gives exactly the serialisers' hashes.

The extension is built here, into a temporary directory, by the compiled build's own step
(`impl.compiled.build.compile_native`), so the tests session checks the C code even though the
twin it runs is pure; without a C compiler, Python headers or OpenSSL's headers the tests skip,
naming what failed. In CI's compiled step (`VTWIN_COMPILED=1`) the request hasher must really
take this path whenever the build has the extension.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from types import ModuleType

import cbor2
import pytest
import xxhash
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

import impl.core.request_hasher as request_hasher
from impl.compiled import NATIVE_MODULES
from impl.core.hashing import make_none_hash, sha256_digest
from impl.core.request_hasher import RequestBlockHasher
from impl.sched.request import Request
from tests.core.helpers import build_native, reference_chain, require_compiled_native

NAME = "impl.core._blockhash"
EDGES = [0, 23, 24, 255, 256, 32767, 32768, 65535, 65536, 2**30 - 1, 2**30, 2**31 - 1, 2**31,
         2**32 - 1, 2**32, 2**60, 2**63, -1, -(2**31)]
token = st.one_of(st.integers(0, 70_000), st.sampled_from(EDGES), st.integers(0, 2**32 - 1))
Digest = Callable[[bytes], bytes] | None
DIGESTS: dict[str, Digest] = {"sha256": None, "xxh3_128": xxhash.xxh3_128_digest}


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return build_native(NAME, tmp_path_factory.mktemp("blockhash"))


def serialised_chain(parent: bytes, tokens: list[int], start: int, size: int, cbor: bool,
                     digest: Digest) -> list[bytes]:
    hashes = []
    while start + size <= len(tokens):
        value = (parent, tuple(tokens[start : start + size]), None)
        data = (cbor2.dumps(value, canonical=True) if cbor
                else pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        parent = sha256_digest(data) if digest is None else digest(data)
        hashes.append(parent)
        start += size
    return hashes


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(token, max_size=400), size=st.sampled_from([1, 3, 4, 5, 16, 17, 64]),
       start=st.integers(0, 20), cbor=st.booleans(), digest=st.sampled_from(sorted(DIGESTS)),
       parent_len=st.sampled_from([0, 16, 23, 24, 32, 255, 256, 300]))
def test_c_hashes_are_a_prefix_of_the_serialisers_and_stop_only_where_declined(
        native: ModuleType, tokens: list[int], size: int, start: int, cbor: bool, digest: str,
        parent_len: int) -> None:
    parent = bytes(i % 251 for i in range(parent_len))
    got = native.hash_blocks(parent, tokens, start, size, cbor, DIGESTS[digest])
    expected = serialised_chain(parent, tokens, start, size, cbor, DIGESTS[digest])
    note(f"{len(got)} of {len(expected)} blocks")
    assert got == expected[: len(got)]
    if len(got) < len(expected):  # it stopped: the next block is one it does not model
        block = tokens[start + len(got) * size : start + (len(got) + 1) * size]
        limit = 2**32 if cbor else 2**31
        chain = got[-1] if got else parent
        assert (any(not 0 <= t < limit for t in block)
                or (not cbor and (size < 4 or len(chain) > 255)))


def test_a_long_pickle_stops_before_its_second_frame(native: ModuleType) -> None:
    tokens = [70_000] * 13_100  # 5 bytes each: past one 64 KiB frame
    assert native.hash_blocks(bytes(32), tokens, 0, len(tokens), False, None) == []
    fits = tokens[:13_000]
    assert native.hash_blocks(bytes(32), fits, 0, len(fits), False, None) == serialised_chain(
        bytes(32), fits, 0, len(fits), False, None)


def test_what_is_not_an_exact_int_is_declined(native: ModuleType) -> None:
    class Token(int):
        pass

    for odd in (True, Token(5), 5.0):
        tokens: list[object] = [1, 2, 3, 4, odd, 6, 7, 8]
        hashes = native.hash_blocks(bytes(32), tokens, 0, 4, False, None)
        assert len(hashes) == 1  # the first block; the second holds the odd token


def test_bad_arguments_are_one_clear_error(native: ModuleType) -> None:
    with pytest.raises(TypeError, match="parent must be bytes, tokens a list or a tuple"):
        native.hash_blocks(bytearray(32), [1, 2, 3, 4], 0, 4, False, None)
    with pytest.raises(TypeError, match="parent must be bytes, tokens a list or a tuple"):
        native.hash_blocks(bytes(32), range(4), 0, 4, False, None)
    assert native.hash_blocks(bytes(32), (1, 2, 3, 4), 0, 4, False, None) == (
        native.hash_blocks(bytes(32), [1, 2, 3, 4], 0, 4, False, None))
    with pytest.raises(ValueError, match="start -1, size 4"):
        native.hash_blocks(bytes(32), [1, 2, 3, 4], -1, 4, False, None)
    with pytest.raises(ValueError, match="start 0, size 0"):
        native.hash_blocks(bytes(32), [1, 2, 3, 4], 0, 0, False, None)
    with pytest.raises(TypeError, match="digest must be None or callable"):
        native.hash_blocks(bytes(32), [1, 2, 3, 4], 0, 4, False, 3)
    with pytest.raises(TypeError, match="digest returned str, not bytes"):
        native.hash_blocks(bytes(32), [1, 2, 3, 4], 0, 4, False, lambda data: "x")
    with pytest.raises(ZeroDivisionError):
        native.hash_blocks(bytes(32), [1, 2, 3, 4], 0, 4, False, lambda data: 1 // 0)
    with pytest.raises(TypeError, match="6 arguments"):
        native.hash_blocks(bytes(32), [1, 2, 3, 4], 0, 4, False)


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"])
@settings(max_examples=40, deadline=None)
@given(tokens=st.lists(token, max_size=300), block_size=st.sampled_from([1, 3, 4, 16, 17]),
       known=st.integers(0, 5))
# Always run, whatever the profile draws (the mutation profile draws 20): every block on the
# C path, in each encoding; and the C path stopping at a token neither encoding models (2**32)
# after hashing some blocks, from the start and after a known block, so the direct path must
# go on from the C path's last hash and from the right token.
@example(tokens=list(range(1, 13)), block_size=4, known=0)
@example(tokens=[*range(1, 9), 2**32, *range(10, 21)], block_size=4, known=0)
@example(tokens=[*range(1, 9), 2**32, *range(10, 21)], block_size=4, known=1)
def test_the_hasher_on_the_c_path_hashes_like_the_serialiser(
        native: ModuleType, algo: str, tokens: list[int], block_size: int, known: int) -> None:
    """Through `RequestBlockHasher`, from a request with `known` blocks hashed already; where
    the C path stops, the direct path goes on (values identical either way)."""
    none_hash = make_none_hash(algo, "0")
    expected = reference_chain(algo, none_hash, tokens, block_size)
    hasher = RequestBlockHasher(block_size, algo, none_hash)
    request = Request("r", tokens)
    request.block_hashes.extend(expected[:known])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hasher, "_native", native.hash_blocks)
        assert hasher(request) == expected[len(request.block_hashes):]


@pytest.mark.parametrize("algo", ["sha256", "xxhash_cbor"])
@settings(max_examples=40, deadline=None)
@given(prompt=st.lists(token, min_size=1, max_size=80), outputs=st.lists(token, max_size=60),
       block_size=st.sampled_from([1, 3, 4, 16]), build_list_at=st.integers(-1, 60),
       batched=st.booleans())
def test_decoded_blocks_hash_from_prompt_and_outputs_without_a_token_list(
        native: ModuleType, algo: str, prompt: list[int], outputs: list[int], block_size: int,
        build_list_at: int, batched: bool) -> None:
    """Output tokens arriving one by one (or in one batch) give the chain over prompt + outputs,
    whether or not the request's `all_token_ids` list has been built (at `build_list_at`
    outputs; -1: never), and the C path never needs that list."""
    none_hash = make_none_hash(algo, "0")
    tokens = prompt + outputs
    expected = reference_chain(algo, none_hash, tokens, block_size)
    hasher = RequestBlockHasher(block_size, algo, none_hash)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hasher, "_native", native.hash_blocks)
        request = Request("r", prompt, block_hasher=hasher)
        if batched:
            request.append_output_token_ids(outputs)
        for count, value in enumerate([] if batched else outputs):
            if count == build_list_at:
                assert request.all_token_ids == tokens[:len(prompt) + count]
            request.append_output_token(value)
    note(f"hashes {len(request.block_hashes)} of {len(expected)}")
    assert request.block_hashes == expected
    never_read = batched or build_list_at < 0 or build_list_at >= len(outputs)
    if never_read and block_size >= 4 and all(0 <= t < 2**31 for t in tokens):
        # The C path takes every token id of a real vocabulary in blocks of 4 and more (a
        # pickled tuple of 1-3 items has its own opcodes, which it leaves to the serialiser),
        # so hashing never built the request's token list (the scheduling path must not: see
        # `Request.all_token_ids`).
        assert request._token_ids is None
    assert request.copy_token_ids() == tokens and request.all_token_ids == tokens


def test_the_compiled_build_hashes_on_the_c_path() -> None:
    require_compiled_native(NAME)
    assert request_hasher.NATIVE is not None
    assert RequestBlockHasher(16, "sha256", bytes(32))._native is request_hasher.NATIVE
    assert NATIVE_MODULES[NAME].source == "impl/core/native/blockhash.c"
