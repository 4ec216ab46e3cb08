"""Shared pieces of the generator families: the builder and a few sampling helpers.

Generators describe prompts as compact specs (named shared segments plus unique filler), so the
files they write stay small and the loader re-creates the exact same token ids. All randomness
comes from a `random.Random` seeded with a string derived from family and seed; Python's
`hash()` is never involved, so files are identical across processes and PYTHONHASHSEED values
(for one Python version: `random`'s derived methods are only stable within a version).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from workloads.controls import ControlSpec
from workloads.grammar import GrammarSpec
from workloads.model import (
    DEFAULT_VOCAB_SIZE,
    AbortSpec,
    AfterSpec,
    EngineConfig,
    PlanSpec,
    PromptSpec,
    RequestSpec,
    Segment,
    Workload,
)
from workloads.multimodal import MultimodalItem
from workloads.pd import KVTransferSpec
from workloads.prompts import TokenSource
from workloads.streaming import StreamChunk

EOS_TOKEN_ID = 2


def rng_for(family: str, seed: int) -> random.Random:
    """The family's random stream; string seeds are hashed with SHA-512 by `random`."""
    return random.Random(f"vtwin/{family}/{seed}")


def scaled(base: int, scale: float, minimum: int = 1) -> int:
    """`base` items at scale 1; scale multiplies the count, never below `minimum`."""
    return max(minimum, math.floor(base * scale + 0.5))


def workload_name(family: str, seed: int, scale: float) -> str:
    if seed == 0 and scale == 1.0:
        return family
    return f"{family}-seed{seed}-scale{scale:g}"


@dataclass(slots=True)
class WorkloadBuilder:
    """Collects requests, plans and aborts and builds a `Workload` in canonical order."""

    name: str
    description: str
    config: EngineConfig
    token_seed: int
    vocab_size: int = DEFAULT_VOCAB_SIZE
    step_ms: float | None = None
    _requests: list[RequestSpec] = field(default_factory=list)
    _plans: dict[str, PlanSpec] = field(default_factory=dict)
    _aborts: list[AbortSpec] = field(default_factory=list)
    _tokens: TokenSource | None = None
    _controls: list[ControlSpec] = field(default_factory=list)

    def request(
        self,
        request_id: str,
        arrival_step: int,
        segments: list[Segment] | tuple[Segment, ...],
        filler: int,
        max_tokens: int,
        *,
        min_tokens: int = 0,
        stop_token_ids: tuple[int, ...] = (),
        eos_token_id: int | None = EOS_TOKEN_ID,
        ignore_eos: bool = False,
        priority: int = 0,
        cache_salt: str | None = None,
        job_id: str | None = None,
        is_last_step: bool = True,
        after: AfterSpec | None = None,
        mm_items: tuple[MultimodalItem, ...] = (),
        stream: tuple[StreamChunk, ...] = (),
        stream_end_step: int | None = None,
        grammar: GrammarSpec | None = None,
        kv_transfer: KVTransferSpec | None = None,
    ) -> RequestSpec:
        """Add a request whose prompt is `segments` followed by `filler` unique tokens (with
        `after`: the new tokens its predecessor's prompt and output are followed by)."""
        if self._tokens is None:
            self._tokens = TokenSource(self.vocab_size, self.token_seed)
        spec = PromptSpec(sum(s.length for s in segments) + filler, tuple(segments))
        request = RequestSpec(
            request_id=request_id,
            arrival_step=arrival_step,
            prompt_token_ids=self._tokens.expand(spec, request_id),
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            stop_token_ids=stop_token_ids,
            eos_token_id=eos_token_id,
            ignore_eos=ignore_eos,
            priority=priority,
            cache_salt=cache_salt,
            prompt_spec=spec,
            job_id=job_id,
            is_last_step=is_last_step,
            after=after,
            mm_items=mm_items,
            stream=stream,
            stream_end_step=stream_end_step,
            resumable=stream_end_step is not None,
            grammar=grammar,
            kv_transfer=kv_transfer,
        )
        self._requests.append(request)
        return request

    def plan(
        self,
        request_id: str,
        eos_at: int | None = None,
        spec_acceptance: tuple[int, ...] | None = None,
    ) -> None:
        self._plans[request_id] = PlanSpec(request_id, eos_at, spec_acceptance)

    def abort(self, request_id: str, step: int) -> None:
        self._aborts.append(AbortSpec(request_id, step))

    def control(self, control: ControlSpec) -> None:
        self._controls.append(control)

    def build(self) -> Workload:
        requests = sorted(self._requests, key=lambda r: r.arrival_step)
        plans = tuple(self._plans[r.request_id] for r in requests if r.request_id in self._plans)
        return Workload(
            name=self.name,
            description=self.description,
            config=self.config,
            requests=tuple(requests),
            aborts=tuple(sorted(self._aborts, key=lambda a: a.step)),
            plans=plans,
            vocab_size=self.vocab_size,
            token_seed=self.token_seed,
            step_ms=self.step_ms,
            controls=tuple(sorted(self._controls, key=lambda c: c.step)),
        )


def poisson_arrivals(rng: random.Random, count: int, rate: float, start: int = 0) -> list[int]:
    """`count` arrival steps of a Poisson process with `rate` arrivals per step."""
    steps: list[int] = []
    now = float(start)
    for _ in range(count):
        steps.append(math.floor(now))
        now += rng.expovariate(rate)
    return steps


def eos_position(rng: random.Random, max_tokens: int, low: float = 0.25) -> int:
    """An output index in the last (1 - low) share of the budget at which EOS is emitted."""
    return rng.randrange(max(0, math.floor(max_tokens * low)), max_tokens)


def seg(key: str, length: int) -> Segment:
    return Segment(key, length)
