"""Byte counts for people: exact where that stays short, two decimals otherwise."""

from __future__ import annotations

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def size(num_bytes: int) -> str:
    """65536 -> '64 KiB'; 2162688 -> '2112 KiB'; 8589803520 -> '8.00 GiB'; 1000 -> '1000 B'."""
    for unit, scale in _UNITS:
        if num_bytes >= scale and num_bytes % scale == 0 and num_bytes // scale < 10000:
            return f"{num_bytes // scale} {unit}"
    for unit, scale in _UNITS:
        if num_bytes >= scale:
            return f"{num_bytes / scale:.2f} {unit}"
    return f"{num_bytes} B"
