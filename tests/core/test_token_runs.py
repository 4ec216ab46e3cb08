"""The direct block encoders write exactly the bytes pickle and cbor2 write, and the hasher's
direct path gives exactly the serialiser path's hashes (`impl.core.token_runs`).

Runs pure in the tests session (the encoders are the same source) and compiled in CI's
compiled step, where `DIRECT` is on and the hasher really takes the direct path."""

from __future__ import annotations

import pickle

import cbor2
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import impl.core.request_hasher as request_hasher
from impl.core.hashing import make_none_hash
from impl.core.request_hasher import RequestBlockHasher
from impl.core.token_runs import MAX_PICKLE_FRAME, cbor_block, pickle_block
from impl.sched.request import Request
from tests.core.helpers import reference_chain

# Every width boundary of both encodings, plus what they refuse.
EDGES = [0, 23, 24, 255, 256, 32767, 32768, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
         2**32, 2**63, 2**64, -1, -(2**31)]
token = st.one_of(st.integers(0, 70_000), st.sampled_from(EDGES), st.integers(0, 2**32 - 1))
parents = st.sampled_from([0, 1, 16, 23, 24, 32, 255, 256]).map(
    lambda n: bytes(i % 256 for i in range(n)))


@settings(max_examples=400, deadline=None)
@given(parent=parents, tokens=st.lists(token, max_size=80), start=st.integers(0, 3))
def test_encoders_write_the_serialisers_bytes(parent: bytes, tokens: list[int],
                                              start: int) -> None:
    end = max(start, len(tokens))
    value = (parent, tuple(tokens[start:end]), None)
    note(f"parent {len(parent)} bytes, tokens[{start}:{end}]")
    pickled = pickle_block(parent, tokens, start, end)
    if pickled is not None:
        assert pickled == pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    encoded = cbor_block(parent, tokens, start, end)
    if encoded is not None:
        assert encoded == cbor2.dumps(value, canonical=True)


def test_encoders_decline_only_what_they_do_not_model() -> None:
    parent = bytes(32)
    plain = [5, 300, 70_000, 2**31 - 1]
    assert pickle_block(parent, plain, 0, 4) is not None
    assert cbor_block(parent, plain, 0, 4) is not None
    assert pickle_block(parent, plain, 0, 3) is None  # TUPLE3, not MARK ... TUPLE
    assert pickle_block(bytes(256), plain, 0, 4) is None  # BINBYTES, not SHORT_BINBYTES
    assert pickle_block(parent, [*plain, 2**31], 0, 5) is None  # LONG1
    assert cbor_block(parent, [*plain, 2**31], 0, 5) is not None  # still a 4-byte uint
    assert cbor_block(parent, [*plain, -1], 0, 5) is None  # a negative int
    assert cbor_block(parent, [*plain, 2**32], 0, 5) is None  # an 8-byte uint


def test_a_pickle_past_one_frame_goes_to_the_serialiser() -> None:
    tokens = [70_000] * (MAX_PICKLE_FRAME // 5 + 1)  # 5 bytes each: past the frame bound
    assert pickle_block(bytes(32), tokens, 0, len(tokens)) is None
    fits = tokens[: MAX_PICKLE_FRAME // 5 - 20]
    assert pickle_block(bytes(32), fits, 0, len(fits)) == pickle.dumps(
        (bytes(32), tuple(fits), None), protocol=pickle.HIGHEST_PROTOCOL)


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"])
@settings(max_examples=60, deadline=None)
@given(tokens=st.lists(token, max_size=300), block_size=st.sampled_from([1, 3, 4, 16, 17, 64]))
def test_the_direct_path_hashes_like_the_serialiser(algo: str, tokens: list[int],
                                                    block_size: int) -> None:
    none_hash = make_none_hash(algo, "0")
    expected = reference_chain(algo, none_hash, tokens, block_size)
    hasher = RequestBlockHasher(block_size, algo, none_hash)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(request_hasher, "DIRECT", True)  # pure: take the compiled build's path
        assert hasher(Request("r", tokens)) == expected


def test_encoders_write_their_smallest_token_and_longest_parent_themselves() -> None:
    """Token 0 and a 255-byte parent are inside what they model: declining them would only
    cost speed (the serialiser takes over), so only this test can tell."""
    parent = bytes(32)
    zeros = (parent, (0, 0, 0, 0), None)
    assert pickle_block(parent, [0, 0, 0, 0], 0, 4) == pickle.dumps(zeros, protocol=5)
    assert cbor_block(parent, [0, 0, 0, 0], 0, 4) == cbor2.dumps(zeros, canonical=True)
    longest = bytes(range(255))
    value = (longest, (1, 2, 3, 4), None)
    assert pickle_block(longest, [1, 2, 3, 4], 0, 4) == pickle.dumps(value, protocol=5)


def test_a_pickle_of_exactly_the_frame_bound_is_written_directly() -> None:
    parent = bytes(32)
    # frame = parent + 10 framing bytes + 2 bytes a token below 256: exactly the bound here
    count = (MAX_PICKLE_FRAME - len(parent) - 10) // 2
    assert len(parent) + 10 + 2 * count == MAX_PICKLE_FRAME
    tokens = [7] * count
    expected = pickle.dumps((parent, tuple(tokens), None), protocol=5)
    assert pickle_block(parent, tokens, 0, count) == expected


@pytest.mark.parametrize("length", [65_535, 65_536, 0x0102_0305])
def test_cbor_length_heads_of_two_and_four_bytes(length: int) -> None:
    """A parent of 64 KiB and more takes a 4-byte length head (every byte of 0x01020305
    differs, so each shift and mask shows); arrays at the 2-byte bound too."""
    parent = bytes(length)
    assert cbor_block(parent, [5], 0, 1) == cbor2.dumps((parent, (5,), None), canonical=True)
    if length <= 65_536:
        tokens = [5] * length
        assert cbor_block(b"", tokens, 0, length) == cbor2.dumps((b"", tuple(tokens), None),
                                                                 canonical=True)
