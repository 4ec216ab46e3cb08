"""A campaign's plan: which systems, which families, where it writes, and its budget (what
`vtwin campaign` parses and both the driver and the cluster read)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.campaign.shrink import Budget


@dataclass(frozen=True, slots=True)
class Plan:
    systems: tuple[str, ...]
    families: tuple[str, ...]
    out: Path
    seeds: tuple[int, int] | None = None
    """Seeds [start, stop); None: 0, 1, 2, ... until the time budget ends."""
    minutes: float | None = None
    address: str | None = None
    workers: int | None = None
    budget: Budget = Budget()
    grace_seconds: float = 60.0
    """After the time budget: how long tasks already running may still finish."""

    @property
    def systems_key(self) -> str:
        return ",".join(self.systems)
