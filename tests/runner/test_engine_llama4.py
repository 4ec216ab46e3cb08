"""The engine twin on a tiny dense Llama 4 text model, whose local layers use chunked local
attention (16-token chunks): the KV-cache planner gives 3 chunked-local groups and 1 full group
of 2 layers each, and logits and greedy tokens equal Hugging Face's `Llama4ForCausalLM` under
chunked prefill, preemption, block sizes above and below the chunk, and `vtwin generate`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")
pytest.importorskip("transformers", reason="the Hugging Face reference needs transformers")

from conformance.cli import generate as runner_cli  # noqa: E402
from conformance.runner.logits import paged_logits  # noqa: E402
from impl.core.specs import (  # noqa: E402
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from impl.engine import EngineArgs, LLMEngine  # noqa: E402
from impl.runner.config import load_model_config, parse_model_config  # noqa: E402
from impl.runner.kv_cache import model_kv_cache_config  # noqa: E402
from impl.runner.model import LlamaForCausalLM  # noqa: E402
from impl.runner.sampling_params import SamplingParams  # noqa: E402

CPU = torch.device("cpu")
PROMPTS = [list(range(10, 60)), [4] * 40, list(range(100, 117)), [7, 8]]
GREEDY = SamplingParams(max_tokens=20, ignore_eos=True)


@pytest.fixture(scope="module")
def hf_greedy(hf_llama4: Any) -> list[list[int]]:
    return [hf_llama4.greedy(p, GREEDY.max_tokens) for p in PROMPTS]


def test_config_and_planned_groups(tiny_llama4_dir: Path) -> None:
    config = load_model_config(tiny_llama4_dir)
    assert [config.is_chunked(i) for i in range(8)] == [True, True, True, False] * 2
    assert [config.uses_rope(i) for i in range(8)] == [True, True, True, False] * 2
    groups = model_kv_cache_config(config, 10, 16).kv_cache_groups
    chunked = ChunkedLocalAttentionSpec(16, num_kv_heads=2, head_size=32,
                                        attention_chunk_size=16)
    assert groups == (
        KVCacheGroupSpec(("model.layers.0.self_attn.attn", "model.layers.4.self_attn.attn"),
                         chunked),
        KVCacheGroupSpec(("model.layers.1.self_attn.attn", "model.layers.5.self_attn.attn"),
                         chunked),
        KVCacheGroupSpec(("model.layers.2.self_attn.attn", "model.layers.6.self_attn.attn"),
                         chunked),
        KVCacheGroupSpec(("model.layers.3.self_attn.attn", "model.layers.7.self_attn.attn"),
                         FullAttentionSpec(16, num_kv_heads=2, head_size=32)))


@pytest.mark.parametrize("chunk", [1000, 7, 1])
def test_logits_match_hf(tiny_llama4_dir: Path, hf_llama4: Any, chunk: int) -> None:
    model = LlamaForCausalLM.from_pretrained(tiny_llama4_dir, CPU)
    tokens = list(range(3, 60))  # 57 tokens: four 16-token chunks
    ours = paged_logits(model, tokens, chunk)
    assert float((ours - hf_llama4.logits(tokens)).abs().max()) <= 1e-4


@pytest.mark.parametrize("overrides", [
    {},
    {"max_num_batched_tokens": 16},  # prompts in chunks of 16: every step starts a new chunk
    {"max_num_batched_tokens": 16, "num_blocks": 16},  # preemption
    {"block_size": 32},  # two attention chunks per block
    {"block_size": 8, "max_num_batched_tokens": 24},  # two blocks per chunk, steps mid-chunk
], ids=["plain", "chunked-prefill", "preemption", "block-32", "block-8"])
def test_greedy_matches_hf(tiny_llama4_dir: Path, hf_greedy: list[list[int]],
                           overrides: dict[str, Any]) -> None:
    args = {"max_num_seqs": 4, "max_num_batched_tokens": 64, "max_model_len": 128,
            "device": "cpu", **overrides}
    engine = LLMEngine(tiny_llama4_dir, EngineArgs(**args))
    assert [o.token_ids for o in engine.generate(PROMPTS, GREEDY)] == hf_greedy
    assert (engine.scheduler.num_preemptions > 0) == ("num_blocks" in overrides)


def test_chunks_matter(tiny_llama4_dir: Path, hf_greedy: list[list[int]]) -> None:
    """The same model with full attention on every layer gives other tokens for the prompts
    longer than one chunk (so the tests above do check chunked attention)."""
    full = FullAttentionSpec(16, num_kv_heads=2, head_size=32)
    layout = KVCacheConfig(200, (KVCacheGroupSpec(tuple(
        f"model.layers.{i}.self_attn.attn" for i in range(8)), full),))
    engine = LLMEngine(tiny_llama4_dir, EngineArgs(max_num_seqs=4, max_num_batched_tokens=64,
                                                   max_model_len=128, device="cpu"),
                       kv_cache_config=layout)
    tokens = [o.token_ids for o in engine.generate(PROMPTS, GREEDY)]
    # [7, 8] + 20 tokens: output i comes from position 1 + i; up to position 15 every key is
    # in the first chunk, so the two agree on outputs 0-14 and part from there.
    assert tokens[3][:15] == hf_greedy[3][:15] and tokens[3][15] != hf_greedy[3][15]
    assert all(ours != theirs for ours, theirs in zip(tokens, hf_greedy, strict=True))


def test_vtwin_generate(tiny_llama4_dir: Path, hf_greedy: list[list[int]],
                        capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="vtwin")
    runner_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", "--model", str(tiny_llama4_dir), "--prompt-ids",
                              ",".join(map(str, PROMPTS[0])), "--max-tokens", "20",
                              "--ignore-eos", "--json", "--device", "cpu"])
    assert args.handler(args) == 0
    assert json.loads(capsys.readouterr().out) == {"token_ids": hf_greedy[0]}


def test_moe_layers_are_refused_naming_the_field(tiny_llama4_dir: Path) -> None:
    raw = json.loads((tiny_llama4_dir / "config.json").read_text())
    with pytest.raises(ValueError, match=r"^config.json: moe_layers \[1\]: Llama 4 MoE layers "
                       r"are not supported"):
        parse_model_config({**raw, "moe_layers": [1]})
