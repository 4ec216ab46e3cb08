"""Replays of public LLM serving traces as workloads (see `workloads.traces.replay`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

from vtwin.errors import UserError
from workloads.model import Workload
from workloads.traces import azure, mooncake
from workloads.traces.replay import ReplayOptions

TRACE_FORMATS: MappingProxyType[str, Callable[[str | Path, ReplayOptions | None], Workload]] = (
    MappingProxyType({"mooncake": mooncake.replay, "azure": azure.replay})
)


def from_trace(fmt: str, path: str | Path, options: ReplayOptions | None = None) -> Workload:
    """Replay the trace at `path`, written in format `fmt` (``mooncake`` or ``azure``)."""
    replay = TRACE_FORMATS.get(fmt)
    if replay is None:
        known = ", ".join(TRACE_FORMATS)
        raise UserError(f"unknown trace format {fmt!r} (known: {known})")
    return replay(path, options)


__all__ = ["TRACE_FORMATS", "ReplayOptions", "from_trace"]
