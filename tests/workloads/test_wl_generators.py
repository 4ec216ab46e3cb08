"""Generator families: valid, deterministic, scalable, and shaped for what they exercise."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workloads
from vtwin.errors import UserError
from workloads import FAMILIES, Workload, dumps, generate, loads, prefix_sharing

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_loads_validates_and_is_deterministic(family: str) -> None:
    first = generate(family, seed=7, scale=1.0)
    text = dumps(first)
    assert loads(text, f"{family}.jsonl") == first  # every rule of the loader holds
    assert dumps(generate(family, seed=7, scale=1.0)) == text
    assert dumps(generate(family, seed=8, scale=1.0)) != text
    assert 8 <= len(first.requests) <= 64  # CI-sized at scale 1
    # Timed arrivals; closed-loop turns (`after`) arrive when their chain gets there.
    assert max(r.arrival_step for r in first.requests if r.after is None) < 300
    config = first.config
    sampled = 0 if config.runner == "pooling" else 1  # a pooling model samples no token
    for request in first.requests:
        assert request.prompt_len + sampled * request.max_tokens <= config.max_model_len
        assert max(request.prompt_token_ids) < first.vocab_size


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_scale_multiplies_requests(family: str) -> None:
    small = generate(family, seed=1, scale=0.5)
    big = generate(family, seed=1, scale=3.0)
    assert len(big.requests) > 2 * len(small.requests)
    assert big.config == small.config
    assert big.name == f"{family}-seed1-scale3"


def test_bundled_family_names_are_seed_zero_scale_one() -> None:
    for family in FAMILIES:
        assert dumps(workloads.load(family)) == dumps(generate(family, 0, 1.0))
        assert workloads.load(family).name == family


def test_bad_generate_arguments() -> None:
    with pytest.raises(UserError, match="unknown generator family 'nope'"):
        generate("nope", 0, 1.0)
    with pytest.raises(UserError, match="seed"):
        generate("bursty", -1, 1.0)
    for scale in (0.0, -2.0, float("nan"), float("inf")):
        with pytest.raises(UserError, match="scale"):
            generate("bursty", 0, scale)


def _digests_in_subprocess(hash_seed: str) -> str:
    code = (
        "import hashlib, workloads\n"
        "for f in sorted(workloads.FAMILIES):\n"
        "    text = workloads.dumps(workloads.generate(f, 11, 1.5))\n"
        "    print(f, hashlib.sha256(text.encode()).hexdigest())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_identical_files_across_hash_seeds() -> None:
    one = _digests_in_subprocess("1")
    assert one == _digests_in_subprocess("4242")
    here = "".join(
        f"{f} {hashlib.sha256(dumps(generate(f, 11, 1.5)).encode()).hexdigest()}\n"
        for f in sorted(FAMILIES)
    )
    assert one == here


def _by_id(workload: Workload) -> dict[str, workloads.RequestSpec]:
    return {r.request_id: r for r in workload.requests}


def test_family_shapes() -> None:
    storm = generate("preemption-storm", 0, 1.0)
    demand = sum(-(-(r.prompt_len + r.max_tokens) // 16) for r in storm.requests)
    assert demand > 4 * storm.config.usable_blocks
    assert storm.aborts

    prio = generate("priority-mix", 0, 1.0)
    assert prio.config.policy == "priority"
    assert len({r.priority for r in prio.requests}) >= 3

    spec = generate("spec-decode", 0, 1.0)
    k = spec.config.num_spec_tokens
    assert k > 0 and len(spec.plans) == len(spec.requests)
    for plan in spec.plans:
        assert plan.spec_acceptance is not None
        assert all(0 <= a <= k for a in plan.spec_acceptance)
        request = _by_id(spec)[plan.request_id]
        assert sum(a + 1 for a in plan.spec_acceptance) >= request.max_tokens

    hybrid = generate("hybrid-sliding-window", 0, 1.0)
    assert [g.type for g in hybrid.config.kv_cache_groups] == ["full", "sliding_window"]
    assert prefix_sharing(hybrid.requests, 16).ratio > 0.2

    long = generate("long-context", 0, 1.0)
    assert long.config.enable_chunked_prefill and long.config.long_prefill_token_threshold > 0
    assert max(r.prompt_len for r in long.requests) > 4 * long.config.max_num_batched_tokens

    shared = generate("prefix-sharing", 0, 1.0)
    assert prefix_sharing(shared.requests, 16).ratio > 0.4
    assert {r.cache_salt for r in shared.requests} == {None, "tenant-b"}

    bursty = generate("bursty", 0, 1.0)
    steps = [r.arrival_step for r in bursty.requests]
    assert max(steps.count(s) for s in set(steps)) > bursty.config.max_num_seqs // 2
    assert bursty.config.async_scheduling

    heavy = generate("decode-heavy", 0, 1.0)
    assert sum(r.max_tokens for r in heavy.requests) > sum(r.prompt_len for r in heavy.requests)
    assert heavy.plans and all(p.eos_at is not None for p in heavy.plans)


@pytest.mark.parametrize("family", ["multi-turn", "agent-sessions"])
def test_sessions_extend_previous_prompt_and_output(family: str) -> None:
    workload = generate(family, 3, 1.0)
    requests = _by_id(workload)
    plans = workload.plans_by_request()
    turns = 0
    for rid, request in requests.items():
        session, turn = rid.rsplit("-t", 1)
        if turn == "0":
            continue
        turns += 1
        previous = requests[f"{session}-t{int(turn) - 1}"]
        produced = plans[previous.request_id].eos_at
        assert produced is not None
        # Turn k's prompt: turn k-1's prompt, its output (eos_at + 1 tokens), then new input.
        assert request.prompt_token_ids[: previous.prompt_len] == previous.prompt_token_ids
        assert request.prompt_len > previous.prompt_len + produced + 1
        assert request.arrival_step > previous.arrival_step + produced
    assert turns >= 5
