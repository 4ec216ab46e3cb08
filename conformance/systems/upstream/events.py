"""Upstream's KV events, read into the harness's canonical `CacheEvent`s.

Upstream publishes events through a publisher object; `EventSink` stands in for it and keeps
each published batch's events. Event classes differ by release (no `group_idx` before 0.32, no
`lora_name` before it either), so every optional field is read with a default.
"""

from __future__ import annotations

from typing import Any

from conformance.systems.protocol import CacheEvent
from conformance.systems.readback import external_hash


class EventSink:
    """Stands in for upstream's KV-event publisher: keeps each published batch's events."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def publish(self, batch: Any) -> None:
        self.events.extend(batch.events)

    def shutdown(self) -> None:
        """Nothing to release."""


def upstream_event(event: Any) -> CacheEvent:
    """One upstream KV event as the harness compares it."""
    kind = type(event).__name__
    if kind == "BlockStored":
        parent = event.parent_block_hash
        return CacheEvent("stored", getattr(event, "group_idx", None),  # None before 0.32
                          tuple(external_hash(h) for h in event.block_hashes),
                          None if parent is None else external_hash(parent),
                          len(event.token_ids), tuple(event.token_ids), event.block_size,
                          getattr(event, "lora_name", None), _medium(event))
    if kind == "BlockRemoved":
        return CacheEvent("removed", getattr(event, "group_idx", None),
                          tuple(external_hash(h) for h in event.block_hashes),
                          medium=_medium(event))
    return CacheEvent("cleared")


def _medium(event: Any) -> str:
    """The event's tier; releases without the field publish GPU events only."""
    return getattr(event, "medium", None) or "GPU"
