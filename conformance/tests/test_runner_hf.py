"""The engine twin against Hugging Face transformers on the shared runner workloads (chunked
prefill, preemption, prefix-cache hits): equal greedy tokens, logits within LOGIT_TOLERANCE.
Needs torch and transformers, not vLLM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")
pytest.importorskip("transformers", reason="the Hugging Face reference needs transformers")

from conformance.runner.checkpoint import build_tiny_llama  # noqa: E402
from conformance.runner.hf_reference import HFReference  # noqa: E402
from conformance.runner.logits import paged_logits  # noqa: E402
from conformance.runner.systems import first_divergence, hf_generate, impl_generate  # noqa: E402
from conformance.runner.workloads import WORKLOADS  # noqa: E402

# fp32 on CPU; the measured max-abs-diff is ~1e-6 (logits of magnitude ~10).
LOGIT_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("runner-hf"))


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> HFReference:
    return HFReference(model_dir)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_impl_greedy_equals_hf(name: str, model_dir: Path, reference: HFReference) -> None:
    workload = WORKLOADS[name]
    ours = impl_generate(model_dir, workload)
    expected = hf_generate(reference, workload)
    assert ours.token_ids == expected.token_ids, first_divergence(ours.token_ids,
                                                                  expected.token_ids)
    if name == "preemption":
        assert ours.num_preemptions > 0
    if name == "prefix-hits":
        assert sum(n > 0 for n in ours.num_cached_tokens) >= 2
    if name == "chunked-prefill":
        assert max(map(len, workload.prompts)) > workload.max_num_batched_tokens


@pytest.mark.parametrize("chunk", [1000, 13])
def test_logits_within_tolerance(chunk: int, model_dir: Path, reference: HFReference) -> None:
    from impl.runner.model import LlamaForCausalLM

    model: Any = LlamaForCausalLM.from_pretrained(model_dir, torch.device("cpu"))
    for prompt in WORKLOADS["chunked-prefill"].prompts[:3]:
        ours = paged_logits(model, prompt, chunk)
        diff = float((ours - reference.logits(prompt)).abs().max())
        assert diff <= LOGIT_TOLERANCE, f"max-abs-diff {diff:.3g} for a {len(prompt)}-token prompt"
