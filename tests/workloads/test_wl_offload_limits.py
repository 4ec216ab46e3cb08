"""A request's `offload_limits` (`workloads.offload_limits`): round-trips through the writer,
reaches upstream as its `kv_transfer_params` (merged with a P/D part), and bad input is one
line naming file, line and field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance.systems.pd import remote_transfer, upstream_transfer_params
from impl.connector.types import RemoteTransfer
from tests.workloads.one_request import text
from workloads import WorkloadError, loads
from workloads.offload_limits import OffloadLimitsSpec
from workloads.writer import dumps

OFFLOADING: dict[str, Any] = {"type": "offloading", "num_cpu_chunks": 32}
MULTI: dict[str, Any] = {"type": "multi", "connectors": [{"type": "nixl"}, OFFLOADING]}


def test_limits_round_trip_and_only_the_caps_given_are_written() -> None:
    workload = loads(text({"kv_connector": OFFLOADING},
                          offload_limits={"max_load_tokens": 0}))
    assert workload.requests[0].offload_limits == OffloadLimitsSpec(0, None)
    assert loads(dumps(workload)) == workload
    assert json.loads(dumps(workload).splitlines()[1])["offload_limits"] == {
        "max_load_tokens": 0}
    both = loads(text({"kv_connector": MULTI},
                      offload_limits={"max_load_tokens": 8, "max_offload_tokens": 16}))
    assert both.requests[0].offload_limits == OffloadLimitsSpec(8, 16)
    assert "offload_limits" not in dumps(loads(text({"kv_connector": OFFLOADING})))


def test_upstream_gets_the_caps_as_transfer_parameters_beside_a_p_d_part() -> None:
    plain = loads(text({"kv_connector": OFFLOADING}, offload_limits={"max_offload_tokens": 4}))
    assert upstream_transfer_params(plain.requests[0], 16) == {"max_offload_tokens": 4}
    pd = loads(text({"kv_connector": MULTI}, offload_limits={"max_load_tokens": 8},
                    kv_transfer={"role": "prefill"}))
    assert upstream_transfer_params(pd.requests[0], 16) == {
        "do_remote_decode": True, "do_remote_prefill": False, "max_load_tokens": 8}
    assert upstream_transfer_params(loads(text({})).requests[0], 16) is None


def test_a_request_with_caps_alone_is_an_empty_p_d_part_to_the_twin() -> None:
    # Upstream's NIXL connector reads any transfer parameters without do_remote_decode as a
    # decode side's (a bidirectional one then keeps the finished request's blocks).
    caps = loads(text({"kv_connector": MULTI}, offload_limits={"max_load_tokens": 8}))
    assert remote_transfer(caps.requests[0]) == RemoteTransfer()
    assert remote_transfer(loads(text({"kv_connector": MULTI})).requests[0]) is None


@pytest.mark.parametrize(("config", "request_fields", "field", "problem"), [
    ({}, {"offload_limits": {"max_load_tokens": 4}}, "offload_limits",
     "needs the engine's kv_connector of type 'offloading'"),
    ({"kv_connector": {"type": "nixl"}}, {"offload_limits": {"max_load_tokens": 4}},
     "offload_limits", "only the OffloadingConnector reads them"),
    ({"kv_connector": OFFLOADING}, {"offload_limits": {}}, "offload_limits", "names no cap"),
    ({"kv_connector": OFFLOADING}, {"offload_limits": {"max_load_tokens": -1}},
     "offload_limits.max_load_tokens", "greater than or equal to 0"),
    ({"kv_connector": OFFLOADING}, {"offload_limits": {"max_offload_tokens": "8"}},
     "offload_limits.max_offload_tokens", "integer"),
    ({"kv_connector": OFFLOADING}, {"offload_limits": {"max_tokens": 8}},
     "offload_limits.max_tokens", "unknown field"),
    ({"kv_connector": OFFLOADING},
     {"offload_limits": {"max_load_tokens": 4}, "stream_end_step": 3},
     "offload_limits", "streaming session"),
])
def test_bad_limits_are_one_line_naming_the_field(config: dict[str, Any],
                                                  request_fields: dict[str, Any], field: str,
                                                  problem: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        loads(text(config, **request_fields), source="w.jsonl")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"w.jsonl:2: field '{field}'"), message
    assert problem in message, message
