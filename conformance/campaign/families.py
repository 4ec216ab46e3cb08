"""Campaign families: a workload from (family, seed), the same one on every machine.

A campaign task is named by a family and a seed and nothing else, so a worker anywhere can
rebuild its workload, a shrinker can rebuild it again, and a store of results can say "done"
per key. Two kinds of family:

* the generator families of `workloads.generators` (`vtwin workloads list`), each with a
  *config draw*: the seed also picks a scale and perturbs the family's engine config (prefix
  caching, hash function, async scheduling, token budget and long-prefill threshold, seats,
  a tighter pool, FCFS or priority, chunked prefill off) within what upstream accepts, so one
  family covers many configs instead of the one it was written for;
* ``hypothesis``: the scheduler's whole generated space (`conformance.sched.strategies.workloads`),
drawn   by Hypothesis under ``@seed(seed)``. Its first example is always the minimal one, so the
  draw is the second: a plain random example, and deterministic for a given Hypothesis version.

Everything random comes from `random.Random` seeded with a string (SHA-512 inside `random`),
never from `hash()`, so the workload does not depend on PYTHONHASHSEED.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from vtwin.errors import UserError
from workloads.generators import FAMILIES, PAIR_FAMILIES, generate
from workloads.model import EngineConfig, Workload

HYPOTHESIS = "hypothesis"
SCALES = (0.25, 0.5, 0.5, 1.0)
"""Generated workloads stay small: many short workloads find more than a few long ones."""
HASH_ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
BASIC_POLICIES = ("fcfs", "priority")
"""Policies every scheduler option combines with; a family with another keeps its config's
policy and scheduling mode as written."""


def family_names() -> tuple[str, ...]:
    """Every family a campaign knows, in the order `--families all` runs them. The P/D pair
    families are not among them: a campaign compares one instance per workload, and a pair
    runs two (`vtwin conform` and the suite run them)."""
    return (*(f for f in FAMILIES if f not in PAIR_FAMILIES), HYPOTHESIS)


FOCUS: dict[str, tuple[str, ...]] = {
    "kv-layouts": (HYPOTHESIS, "hybrid-sliding-window", "prefix-sharing", "multi-turn"),
    "preemption": ("priority-mix", "preemption-storm", "bursty", HYPOTHESIS),
    "spec-decode": ("spec-decode", "structured-output", HYPOTHESIS),
    "connectors": ("offload-sessions", "offload-sessions-lazy", "pd-disaggregation",
                   "pd-disaggregation-recompute", "pd-disaggregation-push", "pd-offloading",
                   "pd-offloading-cpu-first", "pd-readback"),
    "request-surface": ("multimodal", "multimodal-unchunked", "structured-output",
                        "streaming-sessions", "pooling", "operator-controls", "encoder-decoder",
                        "encoder-decoder-window"),
}
"""Focus groups, `@NAME` in a family list: the families where one class of states lives (a
hybrid's hit search, preemption within a step, drafts and padding, transfers, the request
surface). Drawn from all families at once, a rare state's families get a fraction of the
runs; the guided search found `hybrid-hit-single-pass` in 264 s drawing from `@kv-layouts`'s
first two and not in 6 minutes drawing from all."""


def parse_families(text: str) -> tuple[str, ...]:
    """`all`, or a comma-separated list of family names and `@FOCUS` groups; one `UserError`
    line otherwise."""
    known = family_names()
    if text.strip() == "all":
        return known
    chosen: list[str] = []
    unknown: list[str] = []
    for name in (n.strip() for n in text.split(",")):
        if name.startswith("@") and name[1:] in FOCUS:
            chosen += FOCUS[name[1:]]
        elif name in known:
            chosen.append(name)
        elif name:
            unknown.append(name)
    if unknown or not chosen:
        groups = ", ".join(f"@{g}" for g in FOCUS)
        raise UserError(f"--families: unknown family {', '.join(unknown) or repr(text)} "
                        f"(known: all, {groups}, {', '.join(known)})")
    return tuple(dict.fromkeys(chosen))


def focus_of_the_night(ordinal: int) -> str:
    """The focus group a nightly's guided share searches: they take turns, one a night
    (`ordinal`: the night's date as `date.toordinal()`)."""
    return tuple(FOCUS)[ordinal % len(FOCUS)]


FORK = "continuum-fork"
"""The only reference that knows the continuum policy (upstream releases refuse it)."""


def workload_for(family: str, seed: int,
                 systems: tuple[str, ...] = ()) -> tuple[Workload, dict[str, Any]]:
    """The workload of (family, seed) and its draw (what the seed changed, for the store).

    A family written for the continuum policy (`agentic`) keeps it only when the campaign
    compares against `continuum-fork`; against anything else it runs under FCFS, so its
    closed-loop agent sessions still check the twin against upstream instead of being refused
    by every release."""
    workload, draw = _workload_for(family, seed)
    if workload.config.policy == "continuum" and systems and FORK not in systems:
        config = replace(workload.config, policy="fcfs", continuum=None)
        return replace(workload, config=config), {**draw, "policy": "fcfs"}
    return workload, draw


def _workload_for(family: str, seed: int) -> tuple[Workload, dict[str, Any]]:
    if family == HYPOTHESIS:
        return _hypothesis_workload(seed), {}
    if family not in FAMILIES or family in PAIR_FAMILIES:
        raise UserError(f"unknown campaign family {family!r} (known: {', '.join(family_names())})")
    rng = random.Random(f"vtwin/campaign/{family}/{seed}")
    scale = rng.choice(SCALES)
    base = generate(family, seed, scale)
    config, draw = draw_config(base.config, rng)
    if draw.get("async_scheduling") and async_gap(base) is not None:
        # such a draw would report the twin's known gap, not test anything
        del draw["async_scheduling"]
        config = replace(config, async_scheduling=base.config.async_scheduling)
    name = f"{family}-seed{seed}"
    described = f"campaign draw of {family} seed {seed}: scale {scale:g}" + "".join(
        f", {key}={value}" for key, value in draw.items())
    return replace(base, name=name, description=f"{described}; {base.description}",
                   config=config), {"scale": scale, **draw}


def async_gap(workload: Workload) -> str | None:
    """What in `workload` the twin refuses under async scheduling, or None. Both are documented
    gaps (NotImplementedError in `impl/sched/updates.py` and `impl/sched/resets.py`): upstream
    drops the output of the step in flight there, which the twin does not model."""
    if any(r.stream or r.resumable for r in workload.requests):
        return "streaming sessions"
    if any(c.preempt_running for c in workload.controls):
        return "a prefix-cache reset that preempts running requests"
    return None


def draw_config(config: EngineConfig, rng: random.Random) -> tuple[EngineConfig, dict[str, Any]]:
    """Perturb a family's config within what upstream and the workload format accept.

    Rules kept, each one a way a draw could otherwise break the run rather than test it:
    a policy other than FCFS or priority (continuum, which refuses async scheduling) and its
    scheduling mode stay as the family wrote them; the budget never below `max_num_seqs`;
    chunked prefill off (drawn or the family's) only with a budget of at least `max_model_len`;
    no long-prefill threshold for an encoder-decoder model; with spec decode no
    long-prefill threshold below ``1 + num_spec_tokens`` (vLLM 0.32 asserts when a padded
    decode is cut by it, `strategies.engine_configs`); the pool still holds a full-length
    request in every KV-cache group plus a block, or admission would wait forever on both
    sides alike."""
    changes: dict[str, Any] = {}

    def maybe(name: str, odds: float, value: Any) -> None:
        if rng.random() < odds and value != getattr(config, name):
            changes[name] = value

    maybe("enable_prefix_caching", 0.2, False)
    maybe("hash_algo", 0.5, rng.choice(HASH_ALGOS))
    basic = config.policy in BASIC_POLICIES  # (every draw is made either way: same stream)
    maybe("async_scheduling", 0.3, not config.async_scheduling if basic else
          config.async_scheduling)
    maybe("policy", 0.2, "priority" if basic else config.policy)
    seats = rng.choice((1, 2, 4, config.max_num_seqs))
    maybe("max_num_seqs", 0.3, seats)
    seats = changes.get("max_num_seqs", config.max_num_seqs)
    spec_floor = 1 + config.num_spec_tokens if config.num_spec_tokens else 1
    # An encoder-decoder model runs with no threshold (upstream turns it off).
    maybe("long_prefill_token_threshold", 0.0 if config.is_encoder_decoder else 0.3,
          rng.choice((0, max(16, spec_floor), 64)))
    # Chunked prefill off (drawn, or the family's) keeps a budget of at least max_model_len.
    floor = seats if config.enable_chunked_prefill else max(seats, config.max_model_len)
    if rng.random() < 0.15:
        changes["enable_chunked_prefill"] = False
        changes["max_num_batched_tokens"] = max(config.max_model_len, seats)
    else:
        maybe("max_num_batched_tokens", 0.3,
              max(floor, rng.choice((32, 64, config.max_num_batched_tokens // 2))))
    groups = len(config.kv_cache_groups)
    floor = groups * (-(-config.max_model_len // config.block_size) + 1) + 1
    if floor < config.num_blocks:
        maybe("num_blocks", 0.25, rng.randint(floor, config.num_blocks))
    return replace(config, **changes), changes


def _hypothesis_workload(seed: int) -> Workload:
    """The second example Hypothesis draws under `@seed(seed)` (see the module docstring)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    from conformance.sched.strategies.workloads import workloads

    drawn: list[Workload] = []

    @seeded(seed)
    @settings(max_examples=2, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(workloads())
    def collect(workload: Workload) -> None:
        drawn.append(workload)

    collect()
    workload = drawn[-1]
    plans = workload.plans_by_request()  # in request order, as a workload file reads back
    return replace(workload, name=f"{HYPOTHESIS}-seed{seed}",
                   description=f"campaign draw of the generated space, Hypothesis seed {seed}",
                   plans=tuple(plans[r.request_id] for r in workload.requests
                               if r.request_id in plans))
