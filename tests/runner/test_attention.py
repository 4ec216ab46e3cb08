"""Paged attention: the torch reference, the batched CPU kernel and the native C kernel against
dense attention, the Triton kernel against the reference (natively, with the `gpu` mark; under
the interpreter in test_triton_interpreter)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")

from impl.runner import attention_cpu  # noqa: E402
from impl.runner.attention_backend import native_backend, native_missing  # noqa: E402
from impl.runner.attention_cpu import (  # noqa: E402
    cpu_paged_attention,
    gather_pages,
    request_runs,
)
from impl.runner.attention_metadata import head_major  # noqa: E402
from impl.runner.attention_torch import torch_paged_attention  # noqa: E402
from impl.runner.attention_triton import triton_available  # noqa: E402
from impl.runner.native import NativeKernels  # noqa: E402
from tests.runner.attention_cases import (  # noqa: E402
    CASES,
    dense_attention,
    setup,
    triton_vs_reference,
)

NATIVE_MISSING = native_missing()
KERNELS = {"torch": torch_paged_attention, "cpu": cpu_paged_attention}
if NATIVE_MISSING is None:
    KERNELS["native"] = native_backend(NativeKernels.load()).attend
KERNEL_NAMES = [pytest.param(name, marks=pytest.mark.skipif(
    name == "native" and NATIVE_MISSING is not None, reason=str(NATIVE_MISSING)))
    for name in ("torch", "cpu", "native")]
"""The CPU-runnable kernels, each checked against dense attention on every case (the native
one skipped, with the reason, where it cannot be built)."""


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_dense_attention(name: str, kernel: str) -> None:
    case = CASES[name]
    s = setup(case, "cpu")
    out = KERNELS[kernel](s.query, s.kv_cache, s.meta, case.scale)
    torch.testing.assert_close(out, dense_attention(s, case), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
def test_kernel_reads_only_its_own_pages(kernel: str) -> None:
    """Scribbling over every page no request owns changes nothing."""
    case = CASES["mixed-ragged"]
    s = setup(case, "cpu")
    attend = KERNELS[kernel]
    before = attend(s.query, s.kv_cache, s.meta, case.scale)
    owned = {int(b) for b in s.meta.block_table.flatten()}
    for block in range(s.kv_cache.shape[0]):
        if block not in owned:
            s.kv_cache[block] = 1e6
    assert torch.equal(before, attend(s.query, s.kv_cache, s.meta, case.scale))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
def test_triton_on_cuda_matches_reference() -> None:
    diffs = triton_vs_reference("cuda")
    assert max(diffs.values()) <= 1e-5, diffs


def test_request_runs_keep_decodes_apart_and_split_at_the_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Decodes never join a run of longer queries; a run stops growing at the score budget
    (and a request over it still gets a run of its own)."""
    assert list(request_runs((1, 1, 5, 3, 1), (9, 20, 5, 40, 7), 16)) == [
        (0, 2), (2, 4), (4, 5)]
    monkeypatch.setattr(attention_cpu, "SCORE_BUDGET", 2 * 8 * 48)
    # (0,1): 2 requests x 8 queries x 48 keys fits; adding request 2 (3 x 8 x 48) does not.
    assert list(request_runs((8, 4, 2, 100), (40, 33, 20, 100), 16)) == [
        (0, 2), (2, 3), (3, 4)]
    assert list(request_runs((), (), 16)) == []


def test_cpu_kernel_over_many_small_runs_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cutting the batch into one run per request changes nothing but the batching."""
    case = CASES["mixed-ragged"]
    s = setup(case, "cpu")
    whole = cpu_paged_attention(s.query, s.kv_cache, s.meta, case.scale)
    monkeypatch.setattr(attention_cpu, "SCORE_BUDGET", 1)
    assert len(list(request_runs(case.query_lens, case.seq_lens, case.block_size))) == 5
    split = cpu_paged_attention(s.query, s.kv_cache, s.meta, case.scale)
    torch.testing.assert_close(split, whole, atol=1e-6, rtol=1e-6)


def test_gather_pages_copies_each_heads_tiles_in_token_order() -> None:
    """[2, kv_heads, R, pages * block_size, d]: request r's keys of head h in token order."""
    pages = head_major(torch.arange(5 * 2 * 3 * 4 * 2, dtype=torch.float32)
                       .view(5, 2, 3, 4, 2), 4)  # 5 blocks, 3 KV heads, block 4, d 2
    table = torch.tensor([[3, 1], [0, 4]], dtype=torch.int32)
    out = gather_pages(pages, table)
    assert out.shape == (2, 3, 2, 8, 2)
    for kv in range(2):
        for head in range(3):
            for req in range(2):
                expected = torch.cat([pages[int(b), kv, :, head] for b in table[req]])
                assert torch.equal(out[kv, head, req], expected)


def test_gather_pages_refuses_a_token_major_cache() -> None:
    with pytest.raises(ValueError, match="must be head-major"):
        gather_pages(torch.zeros(4, 2, 16, 2, 8), torch.zeros(1, 1, dtype=torch.int32))


@pytest.mark.parametrize("name", ["decode", "mixed-ragged", "sliding-window"])
def test_cpu_kernel_on_a_bf16_cache_equals_the_fp32_math(name: str) -> None:
    """A bf16 cache takes the copy-both-K-and-V decode path (fp32 caches weight V in place):
    the result equals the kernel on the same values held in fp32."""
    case = CASES[name]
    s = setup(case, "cpu")
    bf16 = head_major(s.kv_cache.transpose(2, 3).to(torch.bfloat16), case.block_size)
    widened = head_major(bf16.transpose(2, 3).float(), case.block_size)
    torch.testing.assert_close(cpu_paged_attention(s.query, bf16, s.meta, case.scale),
                               cpu_paged_attention(s.query, widened, s.meta, case.scale),
                               atol=1e-5, rtol=1e-5)
