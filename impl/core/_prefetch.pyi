# The compiled build's C extension (impl/core/native/prefetch.c); absent in the pure twin.
from typing import Any

def prefetch(objects: list[Any], start: int, stop: int, /) -> None: ...
