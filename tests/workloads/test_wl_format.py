"""The file format: exact round trips, canonical bytes, compact specs and explicit token ids."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import workloads
from workloads import (
    AbortSpec,
    EngineConfig,
    KVCacheGroup,
    PlanSpec,
    PromptSpec,
    RequestSpec,
    Segment,
    Workload,
    dumps,
    loads,
)
from workloads.prompts import TokenSource


def test_every_bundled_generated_workload_round_trips(tmp_path: Path) -> None:
    for family in workloads.FAMILIES:
        workload = workloads.generate(family, seed=5, scale=1.0)
        path = tmp_path / f"{family}.jsonl"
        workloads.dump(workload, path)
        loaded = workloads.load(path)
        assert loaded == workload, family
        assert dumps(loaded) == path.read_text()


def test_file_is_compact_canonical_json() -> None:
    text = dumps(workloads.generate("prefix-sharing", 1, 1.0))
    lines = text.splitlines()
    header = json.loads(lines[0])
    assert header["type"] == "header" and header["version"] == workloads.FORMAT_VERSION
    assert set(header["config"]) >= {"block_size", "num_blocks", "kv_cache_groups", "hash_algo"}
    for line in lines:
        record = json.loads(line)
        assert line == json.dumps(record, sort_keys=True, separators=(",", ":"))
        assert "prompt_token_ids" not in record  # generated prompts stay compact specs
    assert text.isascii() and text.endswith("\n")


def test_minimal_hand_written_file_uses_defaults() -> None:
    text = "\n".join(
        [
            '{"type":"header","format":"vtwin-workload","version":1,"name":"tiny","step_ms":10}',
            '{"type":"request","request_id":"b","arrival_ms":35,"prompt_token_ids":[5,6,7],'
            '"max_tokens":2,"eos_token_id":2}',
            "",
            '{"type":"request","request_id":"a","arrival_step":1,'
            '"prompt":{"segments":[{"key":"s","length":20}],"length":24},"max_tokens":3}',
            '{"type":"plan","request_id":"b","eos_at":1}',
            '{"type":"abort","request_id":"a","step":2}',
        ]
    )
    workload = loads(text, "tiny.jsonl")
    assert workload.config == EngineConfig()
    assert [r.request_id for r in workload.requests] == ["a", "b"]  # sorted by arrival
    a, b = workload.requests
    assert b.arrival_step == 3 and b.prompt_token_ids == (5, 6, 7)
    assert a.prompt_len == 24 and a.prompt_spec == PromptSpec(24, (Segment("s", 20),))
    assert workload.plans == (PlanSpec("b", eos_at=1),)
    assert workload.aborts == (AbortSpec("a", 2),)
    # A second trip is exact; arrival_ms became arrival_step.
    assert loads(dumps(workload)) == workload
    assert '"arrival_step":3' in dumps(workload)


def test_shared_segments_give_shared_prefixes() -> None:
    text = "\n".join(
        [
            '{"type":"header","format":"vtwin-workload","version":1,"name":"s","token_seed":4}',
            '{"type":"request","request_id":"x","arrival_step":0,"max_tokens":1,'
            '"prompt":{"segments":[{"key":"sys","length":40}],"length":50}}',
            '{"type":"request","request_id":"y","arrival_step":0,"max_tokens":1,'
            '"prompt":{"segments":[{"key":"sys","length":32},{"key":"q","length":8}]}}',
        ]
    )
    x, y = loads(text).requests
    assert x.prompt_token_ids[:32] == y.prompt_token_ids[:32]
    assert x.prompt_token_ids[32:40] != y.prompt_token_ids[32:40]
    assert x.prompt_len == 50 and y.prompt_len == 40
    assert all(0 <= t < 32000 for t in x.prompt_token_ids + y.prompt_token_ids)
    reseeded = loads(text.replace('"token_seed":4', '"token_seed":5')).requests[0]
    assert reseeded.prompt_token_ids != x.prompt_token_ids


def test_workload_requires_sorted_requests() -> None:
    early = RequestSpec("a", 0, (1,), 1)
    late = RequestSpec("b", 5, (1,), 1)
    Workload("w", "", EngineConfig(), (early, late))
    try:
        Workload("w", "", EngineConfig(), (late, early))
    except ValueError:
        pass
    else:
        raise AssertionError("unsorted requests accepted")


_ids = st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=8)


@st.composite
def workloads_strategy(draw: st.DrawFn) -> Workload:
    """Arbitrary valid workloads, both explicit token ids and compact specs."""
    k = draw(st.integers(0, 4))
    window = KVCacheGroup("sliding_window", sliding_window=draw(st.integers(1, 64)))
    config = EngineConfig(
        block_size=draw(st.sampled_from([4, 16, 32])),
        num_blocks=600,
        max_model_len=1024,
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        num_spec_tokens=k,
        kv_cache_groups=draw(st.sampled_from([(KVCacheGroup(),), (KVCacheGroup(), window)])),
        async_scheduling=draw(st.booleans()),
    )
    vocab = draw(st.sampled_from([50, 300, 32000, 70000]))
    tokens = TokenSource(vocab, 3)
    ids = draw(st.lists(_ids, min_size=1, max_size=6, unique=True))
    requests, plans, aborts = [], [], []
    for rid in ids:
        arrival = draw(st.integers(0, 50))
        max_tokens = draw(st.integers(1, 64))
        if draw(st.booleans()):
            prompt = tuple(draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=40)))
            spec = None
        else:
            segs = tuple(
                Segment(draw(st.sampled_from(["s", "t", "u"])), draw(st.integers(1, 70)))
                for _ in range(draw(st.integers(0, 3)))
            )
            spec = PromptSpec(sum(s.length for s in segs) + draw(st.integers(1, 30)), segs)
            prompt = tokens.expand(spec, rid)
        eos = draw(st.sampled_from([None, 2]))
        requests.append(
            RequestSpec(
                rid,
                arrival,
                prompt,
                max_tokens,
                min_tokens=draw(st.integers(0, max_tokens)),
                stop_token_ids=tuple(draw(st.lists(st.integers(0, vocab - 1), max_size=3))),
                eos_token_id=eos,
                ignore_eos=draw(st.booleans()),
                priority=draw(st.integers(-5, 5)),
                cache_salt=draw(st.sampled_from([None, "salt"])),
                lora_name=draw(st.sampled_from([None, "adapter"])),
                prompt_spec=spec,
            )
        )
        if draw(st.booleans()):
            eos_at = draw(st.integers(0, max_tokens - 1)) if eos is not None else None
            acc = tuple(draw(st.lists(st.integers(0, k), min_size=1, max_size=5))) if k else None
            if eos_at is not None or acc is not None:
                plans.append(PlanSpec(rid, eos_at, acc))
        if draw(st.booleans()):
            aborts.append(AbortSpec(rid, arrival + draw(st.integers(0, 20))))
    requests.sort(key=lambda r: r.arrival_step)
    order = {r.request_id: i for i, r in enumerate(requests)}
    plans.sort(key=lambda p: order[p.request_id])
    aborts.sort(key=lambda a: a.step)
    return Workload(
        "hypo",
        "generated by hypothesis",
        config,
        tuple(requests),
        tuple(aborts),
        tuple(plans),
        vocab_size=vocab,
        token_seed=3,
    )


@settings(max_examples=60, deadline=None)
@given(workloads_strategy())
def test_arbitrary_workloads_round_trip(workload: Workload) -> None:
    text = dumps(workload)
    assert loads(text) == workload
    assert dumps(loads(text)) == text


def test_every_suite_entry_writes_a_file_the_format_reads_back_unchanged() -> None:
    """A user exports a suite workload to edit it (`vtwin workloads`): the file must load, and
    load to the same workload (a variant with fewer draft tokens than its base's plans once
    wrote acceptances the format refuses)."""
    from conformance.sched.suite import SUITE
    from workloads import dumps, loads

    for name, entry in SUITE.items():
        workload = entry.make()
        assert loads(dumps(workload), source=name) == workload, name
