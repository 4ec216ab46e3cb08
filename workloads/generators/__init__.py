"""Generator families: seeded, scalable workloads shaped to exercise one scheduler behaviour.

Each family is a function ``(seed, scale, name) -> Workload``. The seed picks the random
stream (and the token content); the scale multiplies the number of requests, conversations or
sessions while lengths and engine config stay put, so a scale-1 workload stays small enough to
run against upstream vLLM in CI (tens of requests, a few hundred steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from vtwin.errors import UserError
from workloads.generators import (
    agentic,
    bursty,
    controls,
    decode_heavy,
    encoder_decoder,
    hybrid,
    long_context,
    multimodal,
    offload,
    pd,
    pd_pair,
    pd_readback,
    pooling,
    preemption_storm,
    prefix_sharing,
    priority_mix,
    sessions,
    spec_decode,
    streaming,
    structured_output,
)
from workloads.generators.common import workload_name
from workloads.model import Workload

MAX_SCALE = 1000.0


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    summary: str
    make: Callable[[int, float, str], Workload]


FAMILIES: MappingProxyType[str, Family] = MappingProxyType(
    {
        f.name: f
        for f in (
            Family(decode_heavy.FAMILY, decode_heavy.SUMMARY, decode_heavy.generate),
            Family(prefix_sharing.FAMILY, prefix_sharing.SUMMARY, prefix_sharing.generate),
            Family(long_context.FAMILY, long_context.SUMMARY, long_context.generate),
            Family(preemption_storm.FAMILY, preemption_storm.SUMMARY, preemption_storm.generate),
            Family(priority_mix.FAMILY, priority_mix.SUMMARY, priority_mix.generate),
            Family(spec_decode.FAMILY, spec_decode.SUMMARY, spec_decode.generate),
            Family(hybrid.FAMILY, hybrid.SUMMARY, hybrid.generate),
            Family(
                sessions.CONVERSATION_FAMILY, sessions.CONVERSATION_SUMMARY, sessions.conversations
            ),
            Family(sessions.AGENT_FAMILY, sessions.AGENT_SUMMARY, sessions.agents),
            Family(bursty.FAMILY, bursty.SUMMARY, bursty.generate),
            Family(agentic.FAMILY, agentic.SUMMARY, agentic.generate),
            Family(offload.EAGER_FAMILY, offload.EAGER_SUMMARY, offload.eager),
            Family(offload.LAZY_FAMILY, offload.LAZY_SUMMARY, offload.lazy),
            Family(multimodal.FAMILY, multimodal.SUMMARY, multimodal.generate),
            Family(controls.FAMILY, controls.SUMMARY, controls.generate),
            Family(streaming.FAMILY, streaming.SUMMARY, streaming.generate),
            Family(structured_output.FAMILY, structured_output.SUMMARY,
                   structured_output.generate),
            Family(pooling.FAMILY, pooling.SUMMARY, pooling.generate),
            Family(multimodal.UNCHUNKED_FAMILY, multimodal.UNCHUNKED_SUMMARY,
                   multimodal.unchunked),
            Family(pd.FAMILY, pd.SUMMARY, pd.generate),
            Family(pd.RECOMPUTE_FAMILY, pd.RECOMPUTE_SUMMARY, pd.recompute),
            Family(pd.PUSH_FAMILY, pd.PUSH_SUMMARY, pd.push),
            Family(pd.OFFLOADING_FAMILY, pd.OFFLOADING_SUMMARY, pd.offloading),
            Family(pd.CPU_FIRST_FAMILY, pd.CPU_FIRST_SUMMARY, pd.offloading_cpu_first),
            Family(pd_readback.FAMILY, pd_readback.SUMMARY, pd_readback.generate),
            Family(pd_pair.FAMILY, pd_pair.SUMMARY, pd_pair.generate),
            Family(pd_pair.PUSH_FAMILY, pd_pair.PUSH_SUMMARY, pd_pair.push),
            Family(pd_pair.RECOMPUTE_FAMILY, pd_pair.RECOMPUTE_SUMMARY, pd_pair.recompute),
            Family(encoder_decoder.FAMILY, encoder_decoder.SUMMARY, encoder_decoder.generate),
            Family(encoder_decoder.WINDOW_FAMILY, encoder_decoder.WINDOW_SUMMARY,
                   encoder_decoder.window),
        )
    }
)
PAIR_FAMILIES = frozenset({pd_pair.FAMILY, pd_pair.PUSH_FAMILY, pd_pair.RECOMPUTE_FAMILY})
"""Families whose workloads are P/D pairs (two instances: `workloads.pd_pair`)."""


def generate(family: str, seed: int = 0, scale: float = 1.0) -> Workload:
    """A workload of `family`; the same arguments always give the same workload."""
    found = FAMILIES.get(family)
    if found is None:
        known = ", ".join(FAMILIES)
        raise UserError(f"unknown generator family {family!r} (known: {known})")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(f"seed must be a non-negative integer, got {seed!r}")
    if not math.isfinite(scale) or not 0 < scale <= MAX_SCALE:
        raise UserError(f"scale must be a number in (0, {MAX_SCALE:g}], got {scale!r}")
    return found.make(seed, float(scale), workload_name(family, seed, float(scale)))
