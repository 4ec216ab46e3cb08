"""Serialising one block for the chained hash directly, byte for byte as pickle and CBOR do.

The hash of a block digests the serialisation of `(parent, tuple(block tokens), None)` with
pickle (protocol 5) or canonical CBOR. The serialisers are C, but each call pays ~0.4 us
(pickle) or ~2.6 us (cbor2) of set-up, plus building the tuple, for a 16-token block; that set-up
is most of the twin's hashing time. For this one shape (no extra keys) the bytes are fixed by
the token values alone, so the encoders below write them into a `librt.strings.BytesWriter`,
which mypyc compiles to inline stores (a few ns a token). Anything else (a token outside the
widths below, a parent of 256+ bytes, a pickle big enough for a second frame) returns None and
the caller uses the serialiser, so values never differ (tests compare bytes over random prompts,
block sizes and every width).

Interpreted, a BytesWriter call costs more than the serialiser saves: `DIRECT` says whether this
module runs compiled, and the hasher uses these encoders only then.

    token            pickle (LE)          CBOR (BE; canonical = shortest)
    0 .. 23          4B t          (2)    t                 (1)
    24 .. 255        4B t          (2)    18 t              (2)
    256 .. 65535     4D b0 b1      (3)    19 b1 b0          (3)
    65536 .. 2**31-1 4A b0 .. b3   (5)    1A b3 .. b0       (5)
    2**31 .. 2**32-1 (serialiser)         1A b3 .. b0       (5)

    pickle: 80 05 | 95 frame:u64 | 43 len parent | 94 28 | tokens | 74 94 4E 87 94 2E
    CBOR:   83 | 40+len parent (58 len when >= 24) | array head n | tokens | F6
"""

from __future__ import annotations

from types import FunctionType
from typing import Final

from librt.strings import BytesWriter, write_i16_be, write_i16_le, write_i32_be, write_i32_le
from mypy_extensions import i16, i32, i64

MIN_PICKLE_TOKENS: Final = 4
"""Below this pickle writes the tuple as TUPLE1..3 instead of MARK ... TUPLE."""
MAX_PICKLE_FRAME: Final = 65536 - 64
"""The pickler starts a second frame near 64 KiB."""
PICKLE_INT_LIMIT: Final = 1 << 31
CBOR_INT_LIMIT: Final = 1 << 32
FRAME_AT: Final = 3
"""Where the pickle frame length (8 bytes, little-endian) starts: after PROTO 5 and FRAME."""


def pickle_block(parent: bytes, tokens: list[int], start: int, end: int) -> bytes | None:
    """pickle.dumps((parent, tuple(tokens[start:end]), None), protocol=5), or None when the
    pickler would write it in another form."""
    if end - start < MIN_PICKLE_TOKENS or len(parent) > 255:
        return None
    out = BytesWriter()
    out.write(b"\x80\x05\x95\x00\x00\x00\x00\x00\x00\x00\x00C")
    out.append(len(parent))
    out.write(parent)
    out.write(b"\x94(")
    for index in range(start, end):
        value = tokens[index]
        if value < 0 or value >= PICKLE_INT_LIMIT:
            return None
        token: i64 = value  # unboxed once, in range
        if token < 256:
            out.append(0x4B)
            out.append(token)
        elif token < 65536:
            out.append(0x4D)
            write_i16_le(out, i16(token - 65536 if token >= 32768 else token))
        else:
            out.append(0x4A)
            write_i32_le(out, i32(token))
    out.write(b"t\x94N\x87\x94.")
    frame = len(out) - (FRAME_AT + 8)
    if frame > MAX_PICKLE_FRAME:
        return None
    out[FRAME_AT] = frame & 0xFF
    out[FRAME_AT + 1] = frame >> 8
    return out.getvalue()


def cbor_block(parent: bytes, tokens: list[int], start: int, end: int) -> bytes | None:
    """cbor2.dumps((parent, tuple(tokens[start:end]), None), canonical=True), or None for a
    token outside 0 <= t < 2**32."""
    out = BytesWriter()
    out.append(0x83)
    _cbor_head(out, 0x40, len(parent))
    out.write(parent)
    _cbor_head(out, 0x80, end - start)
    for index in range(start, end):
        value = tokens[index]
        if value < 0 or value >= CBOR_INT_LIMIT:
            return None
        token: i64 = value  # unboxed once, in range
        if token < 24:
            out.append(token)
        elif token < 256:
            out.append(0x18)
            out.append(token)
        elif token < 65536:
            out.append(0x19)
            write_i16_be(out, i16(token - 65536 if token >= 32768 else token))
        else:
            out.append(0x1A)
            write_i32_be(out, i32(token - 4294967296 if token >= 2147483648 else token))
    out.append(0xF6)
    return out.getvalue()


def _cbor_head(out: BytesWriter, major: int, length: int) -> None:
    """A CBOR head: major type (0x40 bytes, 0x80 array) with its length, shortest form."""
    if length < 24:
        out.append(major | length)
    elif length < 256:
        out.append(major | 24)
        out.append(length)
    elif length < 65536:
        out.append(major | 25)
        out.append(length >> 8)
        out.append(length & 0xFF)
    else:
        out.append(major | 26)
        for shift in (24, 16, 8, 0):
            out.append((length >> shift) & 0xFF)


DIRECT: Final = not isinstance(pickle_block, FunctionType)
"""True when mypyc compiled this module (its functions are then not Python functions)."""
