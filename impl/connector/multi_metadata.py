"""What a MultiConnector's scheduler side hands its worker each step (`impl.connector.multi`).
Apart from the connector so the scheduler's output and the connector protocol can name it
without importing the connector."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class MultiMetadata:
    """One step's metadata of every connector, in order, and the requests whose blocks more
    than one connector holds (request id -> holders beyond the first)."""

    metadata: tuple[Any, ...]
    extra_async_saves: dict[str, int] = field(default_factory=dict)
