"""The workload mutations of guided generation: each operator makes the change it names, keeps
the workload valid, and the same seed makes the same mutant."""

from __future__ import annotations

import random
from dataclasses import replace

from conformance.campaign.families import async_gap, workload_for
from conformance.guided.config_ops import (
    ASPECTS,
    add_group,
    cap_at_boundary,
    cross_aspect,
    tighter_pool,
    window_at_boundary,
)
from conformance.guided.edits import plain, units
from conformance.guided.mutate import OPERATORS, havoc, valid
from conformance.guided.request_ops import (
    abort_one,
    burst,
    drop_request,
    move_arrival,
    output_at_boundary,
    prompt_at_boundary,
    repeat_later,
    share_prefix,
    splice,
)
from workloads.model import KVCacheGroup, Workload


def sample(family: str = "prefix-sharing", seed: int = 1) -> Workload:
    workload, _ = workload_for(family, seed, ("impl", "upstream"))
    return workload


def lengths(workload: Workload) -> dict[str, int]:
    return {r.request_id: r.prompt_len for r in workload.requests}


def test_units_are_the_boundaries_of_blocks_hashes_windows_and_chunks() -> None:
    base = sample()
    config = replace(base.config, block_size=16, hash_block_size=4, kv_cache_groups=(
        KVCacheGroup(), KVCacheGroup("sliding_window", sliding_window=48),
        KVCacheGroup("chunked_local", attention_chunk_size=64)))
    assert units(replace(base, config=config)) == (4, 16, 48, 64)


def test_a_prompt_at_a_boundary_is_on_it_or_one_token_either_side() -> None:
    base = sample()
    before = {r.request_id: r.prompt_token_ids for r in base.requests}
    changed_in = 0
    for seed in range(12):
        mutant = prompt_at_boundary(base, random.Random(seed), [])
        assert mutant is not None and valid(mutant) is not None
        changed = [r for r in mutant.requests if r.prompt_token_ids != before[r.request_id]]
        assert len(changed) <= 1
        changed_in += len(changed)
        for request in changed:
            assert request.prompt_spec is None
            assert any(request.prompt_len % unit in (0, 1, unit - 1) for unit in units(base))
    assert changed_in >= 10


def test_a_shared_prefix_makes_two_prompts_start_alike() -> None:
    base = sample("decode-heavy", 3)
    before = {r.request_id: r.prompt_token_ids for r in base.requests}
    shared_in = 0
    for seed in range(12):
        mutant = share_prefix(base, random.Random(seed), [])
        assert mutant is not None and valid(mutant) is not None
        target = [r for r in mutant.requests if r.prompt_token_ids != before[r.request_id]]
        assert len(target) <= 1
        for request in target:
            others = [r.prompt_token_ids for r in base.requests
                      if r.request_id != request.request_id]
            assert any(request.prompt_token_ids[:4] == other[:4] for other in others)
            shared_in += 1
    assert shared_in >= 10


def test_a_request_repeated_later_arrives_after_every_other() -> None:
    base = sample()
    mutant = repeat_later(base, random.Random(5), [])
    assert mutant is not None and valid(mutant) is not None
    new = [r for r in mutant.requests if r.request_id not in lengths(base)]
    assert len(new) == 1
    assert new[0].arrival_step >= max(r.arrival_step for r in base.requests)
    assert [r.arrival_step for r in mutant.requests] == sorted(
        r.arrival_step for r in mutant.requests)


def test_a_tighter_pool_keeps_room_for_a_full_length_request_in_every_group() -> None:
    base = sample()
    for seed in range(20):
        mutant = tighter_pool(base, random.Random(seed), [])
        assert mutant is not None
        config = mutant.config
        floor = len(config.kv_cache_groups) * (-(-config.max_model_len // config.block_size)
                                               + 1) + 1
        assert floor <= config.num_blocks < base.config.num_blocks
    at_floor = replace(base, config=replace(base.config, num_blocks=floor))
    assert tighter_pool(at_floor, random.Random(0), []) is None


def test_dropping_a_request_takes_its_plan_and_aborts_with_it() -> None:
    base = sample("preemption-storm", 2)
    mutant = drop_request(base, random.Random(1), [])
    assert mutant is not None and len(mutant.requests) == len(base.requests) - 1
    ids = {r.request_id for r in mutant.requests}
    assert all(p.request_id in ids for p in mutant.plans)
    assert all(a.request_id in ids for a in mutant.aborts)


def test_a_burst_adds_copies_at_the_same_arrival() -> None:
    base = sample()
    mutant = burst(base, random.Random(2), [])
    assert mutant is not None and valid(mutant) is not None
    new = [r for r in mutant.requests if r.request_id not in lengths(base)]
    assert new and len({(r.arrival_step, r.prompt_token_ids) for r in new}) == 1
    assert len({r.request_id for r in mutant.requests}) == len(mutant.requests)


def test_an_abort_comes_no_earlier_than_its_request() -> None:
    base = sample()
    for seed in range(10):
        mutant = abort_one(base, random.Random(seed), [])
        assert mutant is not None and len(mutant.aborts) == len(base.aborts) + 1
        arrival = {r.request_id: r.arrival_step for r in mutant.requests}
        assert all(a.step >= arrival[a.request_id] for a in mutant.aborts)


def test_moved_arrivals_keep_requests_in_arrival_order() -> None:
    base = sample("bursty", 4)
    for seed in range(10):
        mutant = move_arrival(base, random.Random(seed), [])
        assert mutant is not None and valid(mutant) is not None
        steps = [r.arrival_step for r in mutant.requests]
        assert steps == sorted(steps)


def test_an_output_at_a_boundary_keeps_its_plan_inside_the_output() -> None:
    base = sample("decode-heavy", 2)
    for seed in range(10):
        mutant = output_at_boundary(base, random.Random(seed), [])
        assert mutant is not None and valid(mutant) is not None
        tokens = {r.request_id: r.max_tokens for r in mutant.requests}
        assert all(p.eos_at is None or p.eos_at < tokens[p.request_id] for p in mutant.plans)


def test_a_spliced_request_comes_from_a_donor() -> None:
    base, donor = sample(), sample("decode-heavy", 7)
    mutant = splice(base, random.Random(3), [donor])
    assert mutant is not None and valid(mutant) is not None
    new = [r for r in mutant.requests if r.request_id not in lengths(base)]
    assert len(new) == 1
    assert new[0].prompt_token_ids in {r.prompt_token_ids for r in donor.requests}
    assert splice(base, random.Random(3), []) is None


def test_operators_leave_requests_with_pinned_prompts_alone() -> None:
    base = sample("multimodal", 1)
    pinned = [r for r in base.requests if not plain(r)]
    assert pinned, "the multimodal family draws requests with items"
    for name, operator in OPERATORS.items():
        for seed in range(4):
            mutant = operator(base, random.Random(seed), [base])
            if mutant is None:
                continue
            after = {r.request_id: r for r in mutant.requests}
            for request in pinned:
                kept = after.get(request.request_id)
                assert kept is None or kept.prompt_token_ids == request.prompt_token_ids, name


def test_havoc_is_a_function_of_its_seed_and_always_valid() -> None:
    base = sample("hybrid-sliding-window", 2)
    made = [havoc(base, random.Random(f"s{n}"), [base]) for n in range(30)]
    again = [havoc(base, random.Random(f"s{n}"), [base]) for n in range(30)]
    assert made == again
    kept = [m for m in made if m is not None]
    assert len(kept) >= 20
    for mutant, operators in kept:
        assert operators and all(name in OPERATORS for name in operators)
        assert valid(mutant) == mutant


def test_a_window_moves_to_a_block_boundary_or_next_to_one() -> None:
    base = sample("hybrid-sliding-window", 1)
    block = base.config.block_size
    moved = 0
    for seed in range(12):
        mutant = window_at_boundary(base, random.Random(seed), [])
        assert mutant is not None and valid(mutant) is not None
        windows = [g.sliding_window for g in mutant.config.kv_cache_groups if g.sliding_window]
        assert windows and all(w % block in (0, 1, block - 1) for w in windows)
        moved += mutant.config != base.config
    assert moved >= 8
    assert window_at_boundary(sample(), random.Random(0), []) is None  # full attention only


def test_an_added_group_makes_a_hybrid_with_room_in_every_group() -> None:
    base = sample()
    kinds = set()
    for seed in range(10):
        mutant = add_group(base, random.Random(seed), [])
        assert mutant is not None and valid(mutant) is not None
        groups = mutant.config.kv_cache_groups
        assert len(groups) == len(base.config.kv_cache_groups) + 1
        kinds.add(groups[-1].type)
        per_group = -(-mutant.config.max_model_len // mutant.config.block_size) + 1
        assert mutant.config.num_blocks > len(groups) * per_group
    assert kinds == {"sliding_window", "chunked_local"}


def test_a_cap_lands_at_a_prompt_length_or_next_to_it() -> None:
    base = sample("decode-heavy", 5)
    prompts = {r.prompt_len for r in base.requests}
    near = {n + d for n in prompts for d in (-1, 0, 1)}
    for seed in range(16):
        mutant = cap_at_boundary(base, random.Random(seed), [])
        assert mutant is not None and valid(mutant) is not None
        config, before = mutant.config, base.config
        if config.max_num_batched_tokens != before.max_num_batched_tokens:
            assert config.max_num_batched_tokens in near or (
                config.max_num_batched_tokens == config.max_num_seqs)
        if config.long_prefill_token_threshold != before.long_prefill_token_threshold:
            assert config.long_prefill_token_threshold in near


def test_a_crossed_aspect_comes_whole_from_the_donor() -> None:
    base, donor = sample(), sample("hybrid-sliding-window", 3)
    crossed = set()
    for seed in range(20):
        mutant = cross_aspect(base, random.Random(seed), [donor])
        if mutant is None:
            continue
        config = mutant.config
        for aspect, names in ASPECTS.items():
            taken = [n for n in names if n != "num_blocks"
                     and getattr(config, n) != getattr(base.config, n)]
            if taken:
                crossed.add(aspect)
                assert all(getattr(config, n) == getattr(donor.config, n) for n in names
                           if n != "num_blocks"), aspect
    assert "layout" in crossed
    assert cross_aspect(base, random.Random(0), [base]) is None  # nothing differs


def test_havoc_never_makes_what_the_twin_refuses_under_async_scheduling() -> None:
    base = sample("streaming-sessions", 2)
    assert async_gap(base) is not None
    for seed in range(40):
        made = havoc(base, random.Random(seed), [base])
        assert made is None or not made[0].config.async_scheduling
