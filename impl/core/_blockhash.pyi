# The compiled build's C extension (impl/core/native/blockhash.c); absent in the pure twin.
from collections.abc import Callable

def hash_blocks(parent: bytes, tokens: list[int] | tuple[int, ...], start: int, size: int,
                cbor: bool, digest: Callable[[bytes], bytes] | None) -> list[bytes]: ...
