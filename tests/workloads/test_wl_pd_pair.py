"""P/D pair workloads (`workloads.pd_pair`): the header's `pd_pair` section round-trips, each
instance's side of the workload is what the router makes of it, and bad input is one line
naming file, line and field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from workloads import WorkloadError, loads
from workloads.pd import KVTransferSpec, PDPairSpec
from workloads.pd_pair import decode_side, prefill_side
from workloads.writer import dumps

CONFIG: dict[str, Any] = {"block_size": 16, "num_blocks": 24, "max_model_len": 256,
                          "kv_connector": {"type": "nixl"}}


def text(pair: Any, config: dict[str, Any] | None = None, *extra: dict[str, Any],
         **request: Any) -> str:
    header = {"type": "header", "format": "vtwin-workload", "version": 1, "name": "x",
              "config": CONFIG if config is None else config, "pd_pair": pair}
    record = {"type": "request", "request_id": "a", "arrival_step": 0,
              "prompt": {"length": 20}, "max_tokens": 3, **request}
    return "\n".join(json.dumps(r) for r in (header, record, *extra)) + "\n"


def test_the_pair_round_trips_and_each_side_is_the_routers() -> None:
    pair = {"router_latency_steps": 2, "decode": {"num_blocks": 18, "max_num_seqs": 2}}
    workload = loads(text(pair, None, {"type": "abort", "request_id": "a", "step": 1},
                          kv_transfer={"role": "decode", "load_fails": True}))
    assert workload.pd_pair == PDPairSpec(2, 18, 2)
    assert loads(dumps(workload)) == workload
    assert json.loads(dumps(workload).splitlines()[0])["pd_pair"] == pair
    prefill, decode = prefill_side(workload), decode_side(workload)
    assert (prefill.name, decode.name) == ("x@prefill", "x@decode")
    assert prefill.config == workload.config and prefill.pd_pair is None
    (p,), (d,) = prefill.requests, decode.requests
    assert (p.kv_transfer, p.max_tokens) == (KVTransferSpec("prefill"), 1)
    assert (d.kv_transfer, d.max_tokens) == (KVTransferSpec("decode", load_fails=True), 3)
    assert (decode.config.num_blocks, decode.config.max_num_seqs) == (18, 2)
    assert decode.config.max_num_batched_tokens == workload.config.max_num_batched_tokens
    assert prefill.aborts == decode.aborts == workload.aborts


def test_a_workload_without_a_pair_writes_none() -> None:
    workload = loads(text(None))
    assert workload.pd_pair is None and "pd_pair" not in dumps(workload)


# field (a case after it in parentheses) -> (pd_pair, config, request fields, message, line)
BAD: dict[str, tuple[Any, dict[str, Any] | None, dict[str, Any], str, int]] = {
    "pd_pair": ({}, {**CONFIG, "kv_connector": None}, {},
                "needs the engine's kv_connector of type 'nixl' (got no connector)", 1),
    "pd_pair.router_latency_steps": ({"router_latency_steps": -1}, None, {},
                                     "greater than or equal to 0", 1),
    "pd_pair.decode.max_num_seqs": ({"decode": {"max_num_seqs": 0}}, None, {},
                                    "greater than or equal to 1 (got 0)", 1),
    "pd_pair.decode.num_blocks": ({"decode": {"num_blocks": 8}}, None, {},
                                  "7 usable blocks cannot hold one request of max_model_len 256",
                                  1),
    "pd_pair.decode.blocks": ({"decode": {"blocks": 8}}, None, {}, "unknown field", 1),
    "pd_pair.decode.num_blocks (hybrid)": ({"decode": {"num_blocks": 20}}, {
        **CONFIG, "num_blocks": 40, "kv_cache_groups": [
            {"type": "full"}, {"type": "sliding_window", "sliding_window": 32}]}, {},
        "19 usable blocks cannot hold one request of max_model_len 256 (32 blocks of 16 over "
        "its groups)", 1),
    "kv_transfer.role": ({}, None, {"kv_transfer": {"role": "prefill"}},
                         "the router assigns the parts", 2),
}


@pytest.mark.parametrize("field", list(BAD))
def test_bad_pairs_name_the_field_and_line(field: str) -> None:
    pair, config, request, message, line = BAD[field]
    with pytest.raises(WorkloadError) as err:
        loads(text(pair, config, **request), source="w.jsonl")
    assert err.value.field == field.split(" (")[0]
    assert err.value.line == line and message in str(err.value)
    assert str(err.value).count("\n") == 0


def test_controls_are_refused_in_a_pair() -> None:
    control = {"type": "control", "step": 1, "action": "reset_prefix_cache"}
    with pytest.raises(WorkloadError, match="operator controls in a P/D pair"):
        loads(text({}, None, control))
