"""The workload field `config.decode_context_parallel_size`: it round-trips, files without it
keep their bytes, and what the twin does not model beside DCP is refused in one line naming
file, line and field; prefill context parallelism is no field at all."""

from __future__ import annotations

from typing import Any

import pytest

from tests.workloads.one_request import text
from workloads import WorkloadError, loads
from workloads.writer import dumps


def test_the_field_round_trips_and_scales_the_scheduler_block() -> None:
    workload = loads(text({"decode_context_parallel_size": 4}))
    config = workload.config
    assert config.decode_context_parallel_size == 4
    assert (config.scheduler_block_size, config.effective_hash_block_size) == (64, 64)
    assert loads(dumps(workload)) == workload


def test_beside_mamba_align_the_hash_block_stays_the_block() -> None:
    """Mamba states are replicated (their blocks keep 16 tokens) while full attention's span
    2 ranks (32): hashes at the gcd, as upstream's engine core sizes them."""
    config = loads(text({"decode_context_parallel_size": 2, "kv_cache_groups": [
        {"type": "full"}, {"type": "mamba", "mamba_cache_mode": "align"}]})).config
    assert (config.scheduler_block_size, config.effective_hash_block_size) == (32, 16)


@pytest.mark.parametrize("connector", [{"type": "simple_cpu_offload", "num_cpu_blocks": 8},
                                       {"type": "offloading", "num_cpu_chunks": 8}])
def test_the_cpu_tiers_run_under_dcp(connector: dict[str, Any]) -> None:
    workload = loads(text({"decode_context_parallel_size": 2, "kv_connector": connector}))
    assert workload.config.kv_connector is not None
    assert loads(dumps(workload)) == workload


def test_a_file_without_them_keeps_its_bytes() -> None:
    workload = loads(text({}))
    assert workload.config.scheduler_block_size == 16
    assert "context_parallel" not in dumps(workload)


@pytest.mark.parametrize(("config", "field", "problem"), [
    ({"kv_cache_groups": [{"type": "full"}, {"type": "sliding_window", "sliding_window": 32}]},
     "kv_cache_groups[1].type", "'sliding_window' group with decode_context_parallel_size 2"),
    ({"kv_cache_groups": [{"type": "full"}, {"type": "mamba"}]},
     "kv_cache_groups[1].mamba_cache_mode", "needs 'align' and prefix caching on"),
    ({"kv_cache_groups": [{"type": "full"}, {"type": "mamba", "mamba_cache_mode": "align"}],
      "enable_prefix_caching": False},
     "kv_cache_groups[1].mamba_cache_mode", "needs 'align' and prefix caching on"),
    ({"kv_connector": {"type": "nixl"}},
     "kv_connector.type", "upstream refuses P/D with DCP"),
    ({"kv_connector": {"type": "multi", "connectors": [
        {"type": "nixl"}, {"type": "offloading", "num_cpu_chunks": 8}]}},
     "kv_connector.type", "'multi' with decode_context_parallel_size 2"),
    ({"hash_block_size": 16}, "hash_block_size", "must be unset"),
    ({"num_blocks": 64, "max_model_len": 2048}, "num_blocks", "(64 blocks of 32)"),
])
def test_what_dcp_does_not_model_is_refused_naming_the_field(config: dict[str, Any], field: str,
                                                             problem: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        loads(text({"decode_context_parallel_size": 2, **config}), source="w.jsonl")
    message = str(caught.value)
    assert message.startswith(f"w.jsonl:1: field 'config.{field}': ")
    assert problem in message
    assert "\n" not in message


def test_prefill_context_parallelism_is_no_field() -> None:
    with pytest.raises(WorkloadError, match="prefill_context_parallel_size"):
        loads(text({"prefill_context_parallel_size": 2}))
