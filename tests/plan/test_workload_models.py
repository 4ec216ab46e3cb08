"""Workloads that name a model description: groups and block size come from the planner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from workloads import dumps, loads
from workloads.errors import WorkloadError
from workloads.model import KVCacheGroup

REQUEST = {"type": "request", "request_id": "a", "arrival_step": 0, "prompt": {"length": 20},
           "max_tokens": 4}


def text(**config: Any) -> str:
    header = {"type": "header", "format": "vtwin-workload", "version": 1, "name": "w",
              "config": config}
    return f"{json.dumps(header)}\n{json.dumps(REQUEST)}\n"


def test_groups_come_from_the_plan_and_dump_round_trips() -> None:
    workload = loads(text(model="llama-4-scout", max_model_len=4096))
    chunked = KVCacheGroup("chunked_local", attention_chunk_size=8192)
    assert workload.config.kv_cache_groups == (chunked, chunked, chunked, KVCacheGroup("full"))
    assert workload.config.model == "llama-4-scout"
    assert loads(dumps(workload)) == workload


def test_block_sizes_follow_the_plan() -> None:
    """Block 8 under 16-token kernels: windows take 16, full pages scale to match."""
    assert loads(text(model="gpt-oss-20b", block_size=8)).config.block_size == 16


def test_mamba_hybrids_take_the_aligned_block_size() -> None:
    """Jamba at block 16 with prefix caching: every group gets the 80-token block."""
    config = loads(text(model="jamba-v0.1", num_blocks=2000)).config
    assert config.block_size == 80
    assert [g.type for g in config.kv_cache_groups] == ["mamba"] * 7 + ["full"]


def test_a_model_file_beside_the_workload(tmp_path: Path) -> None:
    (tmp_path / "tiny.json").write_text(json.dumps({
        "format": "vtwin-model", "name": "tiny", "layers": [
            {"repeat": 2, "layers": [{"type": "full", "num_kv_heads": 1, "head_size": 64},
                                     {"type": "sliding_window", "num_kv_heads": 1,
                                      "head_size": 64, "sliding_window": 48}]}]}))
    path = tmp_path / "w.jsonl"
    path.write_text(text(model="tiny.json"))
    from workloads import load_file

    assert load_file(path).config.kv_cache_groups == (
        KVCacheGroup("full"), KVCacheGroup("sliding_window", sliding_window=48))


@pytest.mark.parametrize(("config", "message"), [
    ({"model": "gpt-5"}, "<string>:1: field 'config.model': no model description file or "
                         "bundled model named 'gpt-5'"),
    ({"model": "gpt-oss-20b", "block_size": 24}, "<string>:1: field 'config.model': "
     "gpt-oss-20b: the plan gives groups block sizes [16, 24]; scheduler workloads run one "
     "block size"),
    ({"model": "gpt-oss-20b", "kv_cache_groups": [{"type": "full"}]},
     "<string>:1: field 'config.kv_cache_groups': gpt-oss-20b's plan gives "
     "[{'type': 'sliding_window', 'sliding_window': 128}, {'type': 'full'}]; leave "
     "kv_cache_groups out or match it"),
    ({"model": ""}, "<string>:1: field 'config.model': String should have at least 1 "
                    "character (got '')"),
])
def test_bad_model_configs_are_one_line(config: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError) as err:
        loads(text(**config))
    assert str(err.value).startswith(message)


def test_an_encoder_decoder_model_plans_a_cross_attention_group() -> None:
    """Whisper's decoder: its plan gives full and cross-attention groups, and the workload
    then has to be an encoder-decoder one (prefix caching off and the rest)."""
    settings = {"model": "whisper-large-v3", "max_model_len": 448, "num_blocks": 400,
                "max_num_batched_tokens": 2048, "enable_prefix_caching": False,
                "enable_chunked_prefill": False,
                "multimodal": {"max_num_encoder_input_tokens": 1500, "encoder_cache_size": 1500,
                               "disable_chunked_mm_input": True}}
    config = loads(text(**settings)).config
    assert config.kv_cache_groups == (KVCacheGroup("full"), KVCacheGroup("cross_attention"))
    assert config.is_encoder_decoder
    with pytest.raises(WorkloadError, match="config.enable_prefix_caching"):
        loads(text(**{**settings, "enable_prefix_caching": True}))
