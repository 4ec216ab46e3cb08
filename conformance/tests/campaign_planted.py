"""Planted systems for the campaign tests, importable by Ray workers as `module:factory` specs.

`planted`: the twin reporting the block table of a request whose prompt is longer than
`LONG_PROMPT` tokens backwards: a divergence at `exact` (`block_tables`) that needs exactly one
such request, so a shrunk workload has one request and a prompt just past the threshold.

`refuses_async` (and its twin `refuses_async_too`): the twin, refusing any config with async
scheduling when built, as a release refuses a config it does not support.

`hang_once`: the twin, except that the first `schedule()` call across all processes (a file
created with O_EXCL under ``$VTWIN_CAMPAIGN_TEST_DIR``) writes its process id there and hangs
until that process is killed: the test kills it, and Ray's retry must bring the result back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from conformance.systems.protocol import Scheduled
from conformance.systems.transfer_records import BlockIds
from conformance.systems.twin import ImplSystem
from workloads.model import EngineConfig, RequestSpec

LONG_PROMPT = 40
TEST_DIR_ENV = "VTWIN_CAMPAIGN_TEST_DIR"
HANG_FILE = "hang.pid"


class PlantedImpl(ImplSystem):
    name = "impl-planted"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.long: set[str] = set()

    def add_request(self, request: RequestSpec, arrival_time: float) -> None:
        if request.prompt_len > LONG_PROMPT:
            self.long.add(request.request_id)
        super().add_request(request, arrival_time)

    def block_tables(self, request_ids: Sequence[str]) -> dict[str, BlockIds]:
        tables = super().block_tables(request_ids)
        return {rid: tuple(tuple(reversed(g)) for g in table) if rid in self.long else table
                for rid, table in tables.items()}


class HangOnceImpl(ImplSystem):
    name = "impl-hang-once"

    def schedule(self) -> Scheduled:
        marker = Path(os.environ[TEST_DIR_ENV]) / HANG_FILE
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return super().schedule()
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        time.sleep(300)  # killed by the test long before
        return super().schedule()


def planted(config: EngineConfig) -> PlantedImpl:
    return PlantedImpl(config)


def hang_once(config: EngineConfig) -> HangOnceImpl:
    return HangOnceImpl(config)


def refuses_async(config: EngineConfig) -> ImplSystem:
    if config.async_scheduling:
        raise ValueError("planted: async scheduling is not supported")
    return ImplSystem(config)


refuses_async_too = refuses_async


def unbuildable(config: EngineConfig) -> ImplSystem:
    """A system that can never be built, as a release missing from this machine or one that
    rejects a field of every config: the harness must say it could not be built, never
    report a difference."""
    raise ValueError("planted: this system cannot be built")
