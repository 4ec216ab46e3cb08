"""Scheduler step (schedule + stub runner + update_from_output) in three regimes.

Decode: 16 / 64 / 256 / 1024 requests each decoding one token per step. Stepping keeps that
state steady, so it is built once per process and only topped up in `setup` when requests
finish. Admission: one step admitting 64 arrivals that hit a 2048-token cached prefix.
Chunked prefill: four 8192-token prompts prefilled in 512-token chunks (64 steps). The last two
consume their state, so they are rebuilt before every call (`number = 1`, no warm-up calls).
"""

from __future__ import annotations

from .common import SYSTEMS, memo, require, submodule

scenarios = submodule("scenarios")


class Decode:
    params = [SYSTEMS, [16, 64, 256, 1024]]
    param_names = ["system", "running"]
    timeout = 600

    def setup(self, system: str, running: int) -> None:
        require("impl.sched.scheduler")
        self.state = memo(("decode", system, running), lambda: scenarios.Decode(system, running))
        self.state.top_up()

    def time_step(self, system: str, running: int) -> None:
        self.state.run()


class Admission:
    params = [SYSTEMS]
    param_names = ["system"]
    number = 1
    warmup_time = 0.0

    def setup(self, system: str) -> None:
        require("impl.sched.scheduler")
        self.state = scenarios.Admission(system)

    def time_admit_prefix_hits(self, system: str) -> None:
        self.state.run()


class ChunkedPrefill:
    params = [SYSTEMS]
    param_names = ["system"]
    number = 1
    warmup_time = 0.0

    def setup(self, system: str) -> None:
        require("impl.sched.scheduler")
        self.state = scenarios.ChunkedPrefill(system)

    def time_chunked_prefill(self, system: str) -> None:
        self.state.run()
