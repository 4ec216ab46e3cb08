"""The engine twin against Hugging Face transformers on a tiny local Llama: logits within a
tolerance, greedy tokens equal under chunked prefill, preemption, prefix-cache hits and
speculative decoding; stop tokens, min_tokens and seeded sampling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")
pytest.importorskip("transformers", reason="the Hugging Face reference needs transformers")

from conformance.runner.logits import paged_logits  # noqa: E402
from impl.core.specs import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from impl.engine import EngineArgs, LLMEngine  # noqa: E402
from impl.runner.attention_backend import native_missing  # noqa: E402
from impl.runner.model import LlamaForCausalLM  # noqa: E402
from impl.runner.sampling_params import SamplingParams  # noqa: E402

CPU = torch.device("cpu")
NATIVE_MISSING = native_missing()
needs_native = pytest.mark.skipif(NATIVE_MISSING is not None, reason=str(NATIVE_MISSING))
LOGIT_TOLERANCE = 1e-4  # fp32; measured max-abs-diff is ~1e-6
PROMPTS = [[1, 5, 9, 33, 7, 100, 200, 3], [4] * 40, list(range(10, 75)), [7, 8],
           list(range(300, 341))]
GREEDY = SamplingParams(max_tokens=16, ignore_eos=True)


@pytest.mark.parametrize("backend", ["torch", "cpu", pytest.param("native", marks=needs_native)])
@pytest.mark.parametrize("chunk", [1000, 7, 1])
def test_logits_match_hf(tiny_model_dir: Path, hf_model: Any, chunk: int, backend: str) -> None:
    """The reference path and the CPU fast paths (batched torch attention or the native C
    kernels, packed linears)."""
    model = LlamaForCausalLM.from_pretrained(tiny_model_dir, CPU, backend)
    tokens = list(range(3, 60))
    ours = paged_logits(model, tokens, chunk)
    reference = hf_model.logits(tokens)
    assert float((ours - reference).abs().max()) <= LOGIT_TOLERANCE


def _engine(model_dir: Path, **overrides: Any) -> LLMEngine:
    args = {"max_num_seqs": 4, "max_num_batched_tokens": 64, "max_model_len": 128,
            "device": "cpu", **overrides}
    return LLMEngine(model_dir, EngineArgs(**args))


@pytest.fixture(scope="module")
def hf_greedy(hf_model: Any) -> list[list[int]]:
    return [hf_model.greedy(p, GREEDY.max_tokens) for p in PROMPTS]


@pytest.mark.parametrize("overrides", [
    {},
    {"max_num_batched_tokens": 16},  # every prompt but one is chunked
    {"long_prefill_token_threshold": 8},
    {"num_blocks": 6},  # preemption
    {"num_spec_tokens": 3},  # n-gram drafts, greedy verification
    {"block_size": 32, "enable_prefix_caching": False},
    {"attention_backend": "torch", "max_num_batched_tokens": 16},  # "auto": native or cpu
    {"attention_backend": "cpu", "max_num_batched_tokens": 16},
], ids=["plain", "chunked", "threshold", "preemption", "spec-decode", "no-prefix-cache",
        "torch-reference", "cpu-kernel"])
def test_greedy_matches_hf(tiny_model_dir: Path, hf_greedy: list[list[int]],
                           overrides: dict[str, Any]) -> None:
    engine = _engine(tiny_model_dir, **overrides)
    outputs = engine.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in outputs] == hf_greedy
    assert all(o.finish_reason == "length" for o in outputs)
    if "num_blocks" in overrides:
        assert engine.scheduler.num_preemptions > 0
    if "num_spec_tokens" in overrides:  # accepted drafts save steps
        plain = _engine(tiny_model_dir)
        plain.generate(PROMPTS, GREEDY)
        assert engine.num_steps < plain.num_steps


def test_prefix_cache_hits_keep_tokens(tiny_model_dir: Path, hf_model: Any) -> None:
    shared = list(range(100, 148))  # three full blocks of 16
    prompts = [shared + [5, 6, 7], shared + [9], shared + list(range(20, 40))]
    engine = _engine(tiny_model_dir)
    first = engine.generate(prompts[:1], GREEDY)
    later = engine.generate(prompts[1:], GREEDY)
    assert [o.num_cached_tokens for o in first + later] == [0, 48, 48]
    assert [o.token_ids for o in first + later] == [hf_model.greedy(p, 16) for p in prompts]


def _hybrid(window: int, num_blocks: int) -> KVCacheConfig:
    """Layer 0 in a full-attention group, layer 1 in a sliding-window group: both layers share
    one buffer, each group's block ids naming pages of it."""
    full = FullAttentionSpec(16, num_kv_heads=2, head_size=32)
    sliding = SlidingWindowSpec(16, num_kv_heads=2, head_size=32, sliding_window=window)
    return KVCacheConfig(num_blocks, (
        KVCacheGroupSpec(("model.layers.0.self_attn.attn",), full),
        KVCacheGroupSpec(("model.layers.1.self_attn.attn",), sliding)))


def test_hybrid_layout(tiny_model_dir: Path, hf_greedy: list[list[int]]) -> None:
    """A window longer than any sequence is full attention: HF's tokens, through two groups
    sharing one buffer. A short window (blocks leave the window and are freed) gives the same
    tokens with and without chunking and preemption."""
    wide = LLMEngine(tiny_model_dir, EngineArgs(
        max_num_seqs=4, max_num_batched_tokens=32, max_model_len=128, device="cpu"),
        kv_cache_config=_hybrid(1000, 64))
    assert [o.token_ids for o in wide.generate(PROMPTS, GREEDY)] == hf_greedy
    runs = []
    for num_blocks, budget in ((64, 64), (11, 16)):
        engine = LLMEngine(tiny_model_dir, EngineArgs(
            max_num_seqs=4, max_num_batched_tokens=budget, max_model_len=128, device="cpu"),
            kv_cache_config=_hybrid(24, num_blocks))
        runs.append([o.token_ids for o in engine.generate(PROMPTS, GREEDY)])
    assert runs[0] == runs[1] and engine.scheduler.num_preemptions > 0


def test_stop_token_and_min_tokens(tiny_model_dir: Path, hf_greedy: list[list[int]]) -> None:
    expected = hf_greedy[2]
    stop = expected[4]
    cut = expected.index(stop) + 1
    engine = _engine(tiny_model_dir)
    (out,) = engine.generate([PROMPTS[2]], SamplingParams(max_tokens=16,
                                                          stop_token_ids=(stop,)))
    assert out.token_ids == expected[:cut] and out.finish_reason == "stop"
    (late,) = engine.generate([PROMPTS[2]], SamplingParams(max_tokens=16, min_tokens=cut + 1,
                                                           stop_token_ids=(stop,)))
    assert stop not in late.token_ids[:cut + 1]


def test_seeded_sampling_is_reproducible_and_batch_independent(tiny_model_dir: Path) -> None:
    params = SamplingParams(max_tokens=12, temperature=0.8, top_k=50, top_p=0.9, seed=7,
                            ignore_eos=True)
    alone = _engine(tiny_model_dir).generate([PROMPTS[0]], params)[0].token_ids
    crowded = _engine(tiny_model_dir, max_num_batched_tokens=16).generate(
        [PROMPTS[1], PROMPTS[0], PROMPTS[2]], [GREEDY, params, GREEDY])[1].token_ids
    assert alone == crowded
    other = _engine(tiny_model_dir).generate(
        [PROMPTS[0]], SamplingParams(max_tokens=12, temperature=0.8, seed=8,
                                     ignore_eos=True))[0].token_ids
    assert other != alone


def test_a_cache_too_small_for_any_request_is_an_error(tiny_model_dir: Path) -> None:
    engine = _engine(tiny_model_dir, num_blocks=3)
    with pytest.raises(RuntimeError, match=r"no request fits in the KV cache \(3 blocks\)"):
        engine.generate([list(range(3, 60))], GREEDY)


def test_bad_requests_are_refused(tiny_model_dir: Path) -> None:
    engine = _engine(tiny_model_dir)
    with pytest.raises(ValueError, match="token id 512 outside the vocabulary"):
        engine.add_request("x", [1, 512])
    with pytest.raises(ValueError, match="empty prompt"):
        engine.add_request("y", [])
    with pytest.raises(ValueError, match="leaves no room under max_model_len 128"):
        engine.add_request("z", [1] * 128)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_engine_picks_triton_and_matches_hf(tiny_model_dir: Path,
                                                 hf_greedy: list[list[int]]) -> None:
    from impl.runner.attention_triton import triton_available

    engine = LLMEngine(tiny_model_dir, EngineArgs(max_num_seqs=4, max_num_batched_tokens=16,
                                                  max_model_len=128))
    assert engine.device.type == "cuda"
    assert engine.backend == ("triton" if triton_available() else "torch")
    assert [o.token_ids for o in engine.generate(PROMPTS, GREEDY)] == hf_greedy
