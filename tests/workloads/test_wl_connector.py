"""The workload field `config.kv_connector`: it round-trips through the writer, is left out of
files that do not set it (so every connector-less file keeps its bytes), and bad input is one
line naming file, line and field, like every other config field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.workloads.one_request import text
from workloads import WorkloadError, loads
from workloads.model import KVConnectorConfig, LoadFailure
from workloads.writer import dumps

OFFLOAD: dict[str, Any] = {"type": "simple_cpu_offload", "num_cpu_blocks": 4}


def test_the_field_round_trips_with_every_setting() -> None:
    spec = {**OFFLOAD, "lazy_offload": True, "load_failure_policy": "recompute",
            "load_latency_steps": 0, "store_latency_steps": 3,
            "load_failures": [{"load_event": 2, "block_index": 1}]}
    workload = loads(text({"kv_connector": spec}))
    assert workload.config.kv_connector == KVConnectorConfig(
        "simple_cpu_offload", 4, True, "recompute", 0, 3, (LoadFailure(2, 1),))
    assert loads(dumps(workload)) == workload


def test_defaults_and_absence() -> None:
    """Only type and size are required; without the field there is no connector and the
    written header has no `kv_connector` key (old files keep their bytes)."""
    assert loads(text({"kv_connector": OFFLOAD})).config.kv_connector == KVConnectorConfig(
        num_cpu_blocks=4)
    plain = loads(text({}))
    assert plain.config.kv_connector is None
    assert "kv_connector" not in dumps(plain)


# field (under config.kv_connector) -> (the connector as written, message substring)
BAD: dict[str, tuple[dict[str, Any], str]] = {
    "type": ({**OFFLOAD, "type": "lmcache"}, "got 'lmcache'"),
    "num_cpu_blocks": ({**OFFLOAD, "num_cpu_blocks": 0}, "greater than or equal to 1 (got 0)"),
    "load_failure_policy": ({**OFFLOAD, "load_failure_policy": "retry"}, "got 'retry'"),
    "load_latency_steps": ({**OFFLOAD, "load_latency_steps": -1},
                           "greater than or equal to 0 (got -1)"),
    "load_failures[0].block_index": ({**OFFLOAD, "load_failures": [{"load_event": 0}]},
                                     "required field is missing"),
    "speed": ({**OFFLOAD, "speed": 3}, "unknown field"),
}


@pytest.mark.parametrize("field", sorted(BAD))
def test_bad_input_is_one_line_naming_file_line_and_field(field: str) -> None:
    spec, expected = BAD[field]
    with pytest.raises(WorkloadError) as caught:
        loads(text({"kv_connector": spec}), "w.jsonl")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"w.jsonl:1: field 'config.kv_connector.{field}': "), message
    assert expected in message
    assert (caught.value.line, caught.value.field) == (1, f"config.kv_connector.{field}")


def test_planned_failures_are_refused_on_several_kv_cache_groups() -> None:
    """A failure names a GPU block by its index in a load's list: with two groups the id is
    ambiguous, so the file is refused rather than run with a guess."""
    spec = {**OFFLOAD, "load_failures": [{"load_event": 0, "block_index": 1}]}
    groups = [{"type": "full"}, {"type": "sliding_window", "sliding_window": 32}]
    with pytest.raises(WorkloadError) as caught:
        loads(text({"kv_connector": spec, "kv_cache_groups": groups}), "w.jsonl")
    assert str(caught.value) == (
        "w.jsonl:1: field 'config.kv_connector.load_failures': need a single KV-cache group "
        "(block ids are per group; this config has 2)")
    # Without planned failures the same hybrid config is fine.
    assert loads(text({"kv_connector": OFFLOAD, "kv_cache_groups": groups})).config.kv_connector


OFFLOADING: dict[str, Any] = {"type": "offloading", "num_cpu_chunks": 8}


def test_the_offloading_connector_round_trips_with_every_setting() -> None:
    spec = {**OFFLOADING, "offloaded_block_size": 32, "eviction_policy": "arc",
            "store_threshold": 2, "offload_prompt_only": False, "load_latency_steps": 0,
            "store_latency_steps": 2, "self_describing_kv_events": True}
    workload = loads(text({"kv_connector": spec}))
    assert workload.config.kv_connector == KVConnectorConfig(
        "offloading", load_latency_steps=0, store_latency_steps=2, num_cpu_chunks=8,
        offloaded_block_size=32, eviction_policy="arc", store_threshold=2,
        offload_prompt_only=False, self_describing_kv_events=True)
    assert loads(dumps(workload)) == workload
    written = json.loads(dumps(workload).splitlines()[0])["config"]["kv_connector"]
    assert "num_cpu_blocks" not in written and "lazy_offload" not in written
    # Off (the default) is not written, so files from before the field read back the same.
    plain = json.loads(dumps(loads(text({"kv_connector": OFFLOADING}))).splitlines()[0])
    assert "self_describing_kv_events" not in plain["config"]["kv_connector"]


# field (under config.kv_connector) -> (the OffloadingConnector as written, message substring)
BAD_OFFLOADING: dict[str, tuple[dict[str, Any], str]] = {
    "num_cpu_chunks": ({"type": "offloading"}, "required field is missing"),
    "eviction_policy": ({**OFFLOADING, "eviction_policy": "fifo"}, "got 'fifo'"),
    "offloaded_block_size": ({**OFFLOADING, "offloaded_block_size": 24},
                             "24 is not a multiple of the GPU block size 16"),
    "load_failures": ({**OFFLOADING, "load_failures": []}, "unknown field"),
    "store_threshold": ({**OFFLOADING, "store_threshold": -2},
                        "greater than or equal to 0 (got -2)"),
    "self_describing_kv_events": ({**OFFLOADING, "self_describing_kv_events": "yes"},
                                  "'yes'"),
}


@pytest.mark.parametrize("field", sorted(BAD_OFFLOADING))
def test_bad_offloading_input_is_one_line_naming_the_field(field: str) -> None:
    spec, expected = BAD_OFFLOADING[field]
    with pytest.raises(WorkloadError) as caught:
        loads(text({"kv_connector": spec}), "w.jsonl")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"w.jsonl:1: field 'config.kv_connector.{field}': "), message
    assert expected in message


@pytest.mark.parametrize("group", [{"type": "sliding_window", "sliding_window": 32},
                                   {"type": "mamba", "mamba_cache_mode": "align"}])
def test_a_retention_interval_beside_a_windowed_group_is_whole_offloading_chunks(
        group: dict[str, Any]) -> None:
    """Upstream's OffloadingConnector refuses a retention interval that is not a whole number
    of its chunks beside a group whose hit reads only its tail (a window, a mamba state; an
    interval needs one of those): 48 tokens are three blocks but one and a half chunks of
    32."""
    config = {"kv_cache_groups": [{"type": "full"}, group],
              "prefix_cache_retention_interval": 48,
              "kv_connector": {**OFFLOADING, "offloaded_block_size": 32}}
    with pytest.raises(WorkloadError) as caught:
        loads(text(config), "w.jsonl")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("w.jsonl:1: field 'config.prefix_cache_retention_interval': ")
    assert "chunk of 32 tokens beside a sliding window or mamba group" in message
    config["prefix_cache_retention_interval"] = 64
    assert loads(text(config)).config.prefix_cache_retention_interval == 64


def test_an_eagle_drafter_runs_with_a_connector() -> None:
    """Once refused ("not modelled yet"): EAGLE's block drop applies to a connector's hits too."""
    workload = loads(text({"spec_method": "eagle", "num_spec_tokens": 2,
                           "kv_connector": {**OFFLOAD, "num_cpu_blocks": 8}}))
    assert workload.config.spec_method == "eagle"
    assert workload.config.num_lookahead_tokens == 2
    assert loads(dumps(workload)) == workload


def test_the_nixl_connector_runs_beside_a_mamba_group() -> None:
    """Once refused ("not modelled"): a prefill then leaves its prompt's last token to the
    decode side (`impl.connector.nixl`)."""
    workload = loads(text({"num_blocks": 300, "kv_cache_groups": [
        {"type": "full"}, {"type": "mamba", "mamba_cache_mode": "align"}],
        "kv_connector": {"type": "nixl"}}))
    assert workload.config.kv_connector is not None
    assert workload.config.kv_connector.type == "nixl"
