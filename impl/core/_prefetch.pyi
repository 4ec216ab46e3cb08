# The compiled build's C extension (impl/core/native/prefetch.c); absent in the pure twin.
from collections.abc import Sequence

def prefetch(objects: Sequence[object], start: int, stop: int, /) -> None: ...  # a list
