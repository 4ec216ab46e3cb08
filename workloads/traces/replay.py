"""What every trace replay shares: row selection, the time model and the engine config.

Time model. A trace gives wall-clock arrival times in milliseconds; the engine counts steps.
We assume each engine step takes a fixed `step_ms` (default 20 ms, a typical decode step of a
mid-size model on one GPU) and let `scale` speed the trace up:

    arrival_step = floor((t - t_first) / (step_ms * scale))

so ``scale=2`` replays the same requests at twice the rate. `t_first` is the earliest selected
timestamp, so every replay starts at step 0.

Selection. ``--every K`` keeps rows 0, K, 2K, ... of the file (in file order) and ``--limit N``
keeps the first N of those; rows are then ordered by timestamp (stable). Only rows that are
kept need to be read, so a limit on a huge trace is cheap.

Outputs. A trace records how many tokens were generated, so each request gets exactly that
many: ``max_tokens`` is the recorded count (at least 1) and ``ignore_eos`` is set, as vLLM's
own serving benchmark does when replaying traces.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from vtwin.errors import UserError
from workloads.generators.common import EOS_TOKEN_ID, WorkloadBuilder
from workloads.model import EngineConfig, Segment, Workload

DEFAULT_STEP_MS = 20.0
DEFAULT_BLOCK_SIZE = 16
DEFAULT_CACHE_TOKENS = 131072
MODEL_LEN_QUANTUM = 1024

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How to turn a trace into a workload; the defaults replay the whole trace as recorded."""

    limit: int | None = None
    every: int = 1
    scale: float = 1.0
    step_ms: float = DEFAULT_STEP_MS
    block_size: int = DEFAULT_BLOCK_SIZE
    num_blocks: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    name: str | None = None

    def check(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise UserError(f"--limit must be at least 1, got {self.limit}")
        if self.every < 1:
            raise UserError(f"--every must be at least 1, got {self.every}")
        for flag, value in (("--scale", self.scale), ("--step-ms", self.step_ms)):
            if not math.isfinite(value) or value <= 0:
                raise UserError(f"{flag} must be a positive number, got {value!r}")
        if self.block_size < 1:
            raise UserError(f"--block-size must be at least 1, got {self.block_size}")

    def describe(self) -> str:
        parts = [f"step {self.step_ms:g} ms", f"rate x{self.scale:g}"]
        if self.every != 1:
            parts.append(f"one row in {self.every}")
        if self.limit is not None:
            parts.append(f"first {self.limit} rows")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One trace row in trace terms: when, what prompt, how many output tokens."""

    line: int
    timestamp_ms: float
    segments: tuple[Segment, ...]
    prompt_len: int
    output_len: int


def select(rows: Iterable[T], options: ReplayOptions) -> Iterator[T]:
    kept = 0
    for index, row in enumerate(rows):
        if options.limit is not None and kept >= options.limit:
            return
        if index % options.every == 0:
            kept += 1
            yield row


def replay_config(requests: list[TraceRequest], options: ReplayOptions) -> EngineConfig:
    """An engine that can run every selected request: max_model_len covers the longest one."""
    longest = max(r.prompt_len + max(1, r.output_len) for r in requests)
    max_model_len = -(-longest // MODEL_LEN_QUANTUM) * MODEL_LEN_QUANTUM
    per_request = -(-max_model_len // options.block_size)
    num_blocks = options.num_blocks
    if num_blocks is None:
        num_blocks = 1 + max(4 * per_request, -(-DEFAULT_CACHE_TOKENS // options.block_size))
    elif num_blocks - 1 < per_request:
        raise UserError(
            f"--num-blocks {num_blocks} is too small: the longest request needs {per_request} "
            f"blocks of {options.block_size} tokens plus the null block"
        )
    batched = max(options.max_num_batched_tokens, options.max_num_seqs)
    return EngineConfig(
        block_size=options.block_size,
        num_blocks=num_blocks,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=batched,
        max_model_len=max_model_len,
        enable_chunked_prefill=True,
        enable_prefix_caching=True,
    )


def build_replay(
    requests: list[TraceRequest],
    options: ReplayOptions,
    prefix: str,
    default_name: str,
    description: str,
) -> Workload:
    """The workload for already-selected trace requests."""
    ordered = sorted(requests, key=lambda r: r.timestamp_ms)
    config = replay_config(ordered, options)
    name = options.name or default_name
    builder = WorkloadBuilder(
        name,
        f"{description} ({options.describe()})",
        config,
        token_seed=0,
        step_ms=options.step_ms,
    )
    first = ordered[0].timestamp_ms
    period = options.step_ms * options.scale
    for req in ordered:
        arrival = math.floor((req.timestamp_ms - first) / period)
        covered = sum(s.length for s in req.segments)
        builder.request(
            f"{prefix}-{req.line:06d}",
            arrival,
            req.segments,
            req.prompt_len - covered,
            max(1, req.output_len),
            eos_token_id=EOS_TOKEN_ID,
            ignore_eos=True,
        )
    return builder.build()
