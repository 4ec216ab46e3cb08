"""Multi-turn conversations and agent sessions: each turn re-sends the whole history.

Turn k's prompt is turn k-1's prompt, plus the output turn k-1 produced, plus the new user
message or tool result, so the cache should hit on everything but the newest part. Outputs are
pinned by EOS plans (the model ends the turn at a planned length), which makes the previous
output's length known when the next turn's prompt is written. A turn arrives after the
previous one is expected to finish (prefill steps + output tokens, assuming no contention)
plus a think-time or tool-call gap; under contention it may arrive earlier, as in real
clients that time out or pipeline.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from workloads.generators.common import WorkloadBuilder, rng_for, scaled, seg
from workloads.model import EngineConfig, Segment, Workload

CONVERSATION_FAMILY = "multi-turn"
CONVERSATION_SUMMARY = "chat conversations; each turn extends the previous prompt and output"
AGENT_FAMILY = "agent-sessions"
AGENT_SUMMARY = "tool-using agents; long tool results, short tool calls, tool-call gaps"


@dataclass(frozen=True, slots=True)
class SessionShape:
    """Length ranges (inclusive) of one kind of session."""

    turns: tuple[int, int]
    message: tuple[int, int]
    output: tuple[int, int]
    gap: tuple[int, int]
    final_output: tuple[int, int]


def _session(
    builder: WorkloadBuilder,
    rng: random.Random,
    prefix: str,
    start: int,
    history: list[Segment],
    shape: SessionShape,
) -> None:
    budget = builder.config.max_num_batched_tokens
    turns = rng.randint(*shape.turns)
    arrival = start
    for turn in range(turns):
        history.append(seg(f"{prefix}/in-{turn}", rng.randint(*shape.message)))
        last = turn == turns - 1
        produced = rng.randint(*(shape.final_output if last else shape.output))
        rid = f"{prefix}-t{turn}"
        request = builder.request(rid, arrival, list(history), 0, produced + rng.randint(0, 16))
        builder.plan(rid, eos_at=produced - 1)
        history.append(seg(f"{prefix}/out-{turn}", produced))
        expected = math.ceil(request.prompt_len / budget) + produced
        arrival += expected + rng.randint(*shape.gap)


def conversations(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(CONVERSATION_FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=513,
        max_num_seqs=8,
        max_num_batched_tokens=512,
        max_model_len=2048,
    )
    summary = CONVERSATION_SUMMARY
    builder = WorkloadBuilder(
        name, f"{CONVERSATION_FAMILY} (seed {seed}, scale {scale:g}): {summary}", config, seed
    )
    systems = [seg(f"system-{i}", rng.randint(100, 200)) for i in range(2)]
    shape = SessionShape(
        turns=(2, 4), message=(16, 120), output=(16, 64), gap=(3, 20), final_output=(16, 64)
    )
    for index in range(scaled(6, scale)):
        _session(builder, rng, f"conv{index:03d}", rng.randint(0, 30), [rng.choice(systems)], shape)
    return builder.build()


def agents(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(AGENT_FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=1025,
        max_num_seqs=8,
        max_num_batched_tokens=1024,
        max_model_len=4096,
        hash_algo="xxhash",
    )
    builder = WorkloadBuilder(
        name, f"{AGENT_FAMILY} (seed {seed}, scale {scale:g}): {AGENT_SUMMARY}", config, seed
    )
    tools = seg("agent-tools", 384)
    shape = SessionShape(
        turns=(3, 6), message=(64, 400), output=(12, 40), gap=(2, 12), final_output=(32, 80)
    )
    for index in range(scaled(4, scale)):
        _session(builder, rng, f"agent{index:03d}", rng.randint(0, 20), [tools], shape)
    return builder.build()
