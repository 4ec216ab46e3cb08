"""Deterministic expansion of compact prompt specs into token ids.

A segment key names an endless stream of token ids; a segment of length n is the first n tokens
of its key's stream. The stream is SHAKE-128 of ``"<token_seed>/<namespace>/<key>"`` read as
little-endian 2-byte integers folded into the vocabulary (see `TokenSource._draw`). That gives
three properties the workloads rely on:

* equal keys give equal tokens in any process on any platform (no `hash()`, no global RNG);
* a short segment is a prefix of a longer one with the same key, so a trace's partial last
  block still shares its start with the full block elsewhere;
* it is fast: one hash call per key, the folding is one C-level `bytes.translate`, and every
  token refers to one shared int object per id, so the ~61M tokens of the full Mooncake trace
  expand in a few seconds without an int object per token.

`TokenSource` caches each key's tokens for the life of one load; nothing is kept between loads.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from operator import itemgetter

from workloads.model import PromptSpec, Segment

SEGMENT_NAMESPACE = "seg"
FILLER_NAMESPACE = "req"


class TokenSource:
    """Makes and caches the token streams of one workload (one vocabulary, one token seed)."""

    __slots__ = ("_cache", "_lut", "_table", "_width", "token_seed", "vocab_size")

    def __init__(self, vocab_size: int, token_seed: int) -> None:
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
        self.vocab_size = vocab_size
        self.token_seed = token_seed
        if vocab_size < 256:
            self._width = 1
            self._table = bytes(b % vocab_size for b in range(256))
            limit = vocab_size
        else:
            self._width = 2
            high = min(vocab_size, 1 << 16) // 256
            self._table = bytes(b % high for b in range(256))
            limit = high * 256
        # Every token refers to one of these int objects, so tokens cost no memory of their own.
        self._lut = tuple(range(limit))
        self._cache: dict[str, tuple[int, ...]] = {}

    def stream(self, namespace: str, key: str, length: int) -> tuple[int, ...]:
        """The first `length` tokens of the stream named `namespace/key`."""
        cache_key = f"{namespace}/{key}"
        cached = self._cache.get(cache_key)
        if cached is not None and len(cached) >= length:
            return cached if len(cached) == length else cached[:length]
        tokens = self._draw(f"{self.token_seed}/{cache_key}".encode(), length)
        self._cache[cache_key] = tokens
        return tokens

    def _draw(self, material: bytes, length: int) -> tuple[int, ...]:
        """`length` tokens from the SHAKE-128 output for `material`.

        With 2-byte tokens (little-endian), the high byte is reduced modulo ``H = vocab // 256``
        (capped at 256) by one C-level `translate`, so ids lie in ``[0, 256 * H)``, a subset of
        the vocabulary; no per-token Python code runs.
        """
        if length <= 0:
            return ()
        buf = bytearray(hashlib.shake_128(material).digest(self._width * length))
        if self._width == 1:
            raw = array("B", buf.translate(self._table))
        else:
            buf[1::2] = buf[1::2].translate(self._table)
            raw = array("H", buf)
            if sys.byteorder == "big":
                raw.byteswap()
        if length == 1:
            return (self._lut[raw[0]],)
        picked: tuple[int, ...] = itemgetter(*raw)(self._lut)
        return picked

    def segment(self, segment: Segment) -> tuple[int, ...]:
        return self.stream(SEGMENT_NAMESPACE, segment.key, segment.length)

    def expand(self, spec: PromptSpec, request_id: str) -> tuple[int, ...]:
        """Concrete token ids of `spec` for the request `request_id`."""
        parts = [self.segment(s) for s in spec.segments]
        filler = spec.length - sum(s.length for s in spec.segments)
        if filler < 0:
            raise ValueError("prompt segments are longer than the prompt length")
        if filler:
            # The filler is unique to the request, so it is not worth caching.
            material = f"{self.token_seed}/{FILLER_NAMESPACE}/{request_id}".encode()
            parts.append(self._draw(material, filler))
        if len(parts) == 1:
            return parts[0]
        joined: list[int] = []
        for part in parts:
            joined += part
        return tuple(joined)
