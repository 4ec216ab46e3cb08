"""Paged attention: the torch reference against dense attention, the Triton kernel against the
reference (natively, with the `gpu` mark; under the interpreter in test_triton_interpreter)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")

from impl.runner.attention_torch import torch_paged_attention  # noqa: E402
from impl.runner.attention_triton import triton_available  # noqa: E402
from tests.runner.attention_cases import (  # noqa: E402
    CASES,
    dense_attention,
    setup,
    triton_vs_reference,
)


@pytest.mark.parametrize("name", list(CASES))
def test_reference_matches_dense_attention(name: str) -> None:
    case = CASES[name]
    s = setup(case, "cpu")
    out = torch_paged_attention(s.query, s.kv_cache, s.meta, case.scale)
    torch.testing.assert_close(out, dense_attention(s, case), atol=1e-5, rtol=1e-5)


def test_reference_reads_only_its_own_pages() -> None:
    """Scribbling over every page no request owns changes nothing."""
    case = CASES["mixed-ragged"]
    s = setup(case, "cpu")
    before = torch_paged_attention(s.query, s.kv_cache, s.meta, case.scale)
    owned = {int(b) for b in s.meta.block_table.flatten()}
    for block in range(s.kv_cache.shape[0]):
        if block not in owned:
            s.kv_cache[block] = 1e6
    after = torch_paged_attention(s.query, s.kv_cache, s.meta, case.scale)
    assert torch.equal(before, after)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
def test_triton_on_cuda_matches_reference() -> None:
    diffs = triton_vs_reference("cuda")
    assert max(diffs.values()) <= 1e-5, diffs
