"""P/D workloads (`workloads.pd`): the `nixl` connector and a request's `kv_transfer` part
round-trip through the writer, and bad input is one line naming file, line and field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.workloads.one_request import text
from workloads import WorkloadError, loads
from workloads.model import KVConnectorConfig
from workloads.pd import KVTransferSpec
from workloads.writer import dumps

NIXL: dict[str, Any] = {"type": "nixl"}
OFFLOADING: dict[str, Any] = {"type": "offloading", "num_cpu_chunks": 32}


def test_the_connector_and_the_parts_round_trip() -> None:
    spec = {**NIXL, "load_failure_policy": "recompute", "load_latency_steps": 0,
            "send_latency_steps": 3}
    workload = loads(text({"kv_connector": spec},
                          kv_transfer={"role": "decode", "load_fails": True}))
    assert workload.config.kv_connector == KVConnectorConfig(
        "nixl", load_failure_policy="recompute", load_latency_steps=0, send_latency_steps=3)
    assert workload.requests[0].kv_transfer == KVTransferSpec("decode", True)
    assert loads(dumps(workload)) == workload
    written = [json.loads(line) for line in dumps(workload).splitlines()]
    assert written[0]["config"]["kv_connector"] == spec
    assert written[1]["kv_transfer"] == {"role": "decode", "load_fails": True}
    plain = loads(text({"kv_connector": NIXL}))
    assert "kv_transfer" not in dumps(plain)
    assert "transfer_mode" not in dumps(plain)  # pull, the default, is not written


def test_a_multi_connector_round_trips_and_carries_p_d_parts() -> None:
    multi = {"type": "multi", "connectors": [OFFLOADING, NIXL]}
    workload = loads(text({"kv_connector": multi}, kv_transfer={"role": "decode"}))
    connector = workload.config.kv_connector
    assert connector is not None and connector.type == "multi"
    assert [c.type for c in connector.connectors] == ["offloading", "nixl"]
    assert connector.part("nixl") == KVConnectorConfig("nixl")
    assert loads(dumps(workload)) == workload
    written = json.loads(dumps(workload).splitlines()[0])["config"]["kv_connector"]
    assert [c["type"] for c in written["connectors"]] == ["offloading", "nixl"]


def test_readback_round_trips() -> None:
    spec = {**NIXL, "bidirectional": True, "recompute_threshold": 32}
    workload = loads(text({"kv_connector": spec},
                          kv_transfer={"role": "prefill", "readback_tokens": 12}))
    connector = workload.config.kv_connector
    assert connector == KVConnectorConfig("nixl", bidirectional=True, recompute_threshold=32)
    assert workload.requests[0].kv_transfer == KVTransferSpec("prefill", readback_tokens=12)
    assert loads(dumps(workload)) == workload


def test_push_mode_round_trips() -> None:
    spec = {**NIXL, "transfer_mode": "push", "load_failure_policy": "fail",
            "load_latency_steps": 1, "send_latency_steps": 1}
    workload = loads(text({"kv_connector": spec}))
    assert workload.config.kv_connector == KVConnectorConfig("nixl", transfer_mode="push")
    assert json.loads(dumps(workload).splitlines()[0])["config"]["kv_connector"] == spec


# field -> (config, request fields, message substring, line)
BAD: dict[str, tuple[dict[str, Any], dict[str, Any], str, int]] = {
    "config.kv_connector.send_latency_steps": (
        {"kv_connector": {**NIXL, "send_latency_steps": -1}}, {},
        "greater than or equal to 0 (got -1)", 1),
    "config.kv_connector.transfer_mode": (
        {"kv_connector": {**NIXL, "transfer_mode": "write"}}, {}, "'pull' or 'push'", 1),
    "config.kv_connector.num_cpu_blocks": (
        {"kv_connector": {**NIXL, "num_cpu_blocks": 4}}, {}, "unknown field", 1),
    "config.kv_cache_groups[1]": (
        {"kv_connector": NIXL, "num_blocks": 400, "kv_cache_groups": [
            {"type": "full"}, {"type": "circular_buffer"}]}, {},
        "the 'nixl' connector with a circular_buffer group is not modelled", 1),
    "kv_transfer": ({}, {"kv_transfer": {"role": "decode"}},
                    "needs the engine's kv_connector of type 'nixl' (got no connector)", 2),
    "kv_transfer.role": ({"kv_connector": NIXL}, {"kv_transfer": {"role": "both"}},
                         "got 'both'", 2),
    "kv_transfer.load_fails": ({"kv_connector": NIXL},
                               {"kv_transfer": {"role": "prefill", "load_fails": True}},
                               "only a 'decode' request or a prefill reading back", 2),
    "kv_transfer.pull_lost": ({"kv_connector": NIXL},
                              {"kv_transfer": {"role": "decode", "load_fails": True,
                                               "pull_lost": True}},
                              "a lost pull never reports, so it cannot also fail", 2),
    "config.kv_connector.connectors": (
        {"kv_connector": {"type": "multi", "connectors": [NIXL, NIXL]}}, {},
        "one 'nixl' and one 'offloading' connector", 1),
    "config.kv_connector.connectors[0].num_cpu_blocks": (
        {"kv_connector": {"type": "multi", "connectors": [
            {**NIXL, "num_cpu_blocks": 4}, OFFLOADING]}}, {}, "unknown field", 1),
    "kv_transfer.readback_tokens": ({"kv_connector": NIXL},
                                    {"kv_transfer": {"role": "prefill", "readback_tokens": 8}},
                                    "needs the nixl connector's 'bidirectional': true", 2),
    "config.kv_connector.bidirectional": (
        {"kv_connector": {**NIXL, "bidirectional": True, "transfer_mode": "push"}}, {},
        "push mode refuses bidirectional", 1),
    "stream_end_step": ({"kv_connector": NIXL},
                        {"kv_transfer": {"role": "prefill"}, "stream_end_step": 4},
                        "cannot be a streaming session yet", 2),
}


@pytest.mark.parametrize("field", sorted(BAD))
def test_bad_input_is_one_line_naming_file_line_and_field(field: str) -> None:
    config, request, expected, line = BAD[field]
    with pytest.raises(WorkloadError) as caught:
        loads(text(config, **request), "w.jsonl")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"w.jsonl:{line}: field '{field}': "), message
    assert expected in message
