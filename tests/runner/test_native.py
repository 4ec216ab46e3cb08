"""The native C kernels (`impl/runner/native`): the cache write and the argmax against torch's,
the build (named by its source, a failing compiler reported in one line), and how the backend
is chosen. Attention itself is checked against dense attention with the other kernels in
test_attention.py."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")

from impl.runner import native  # noqa: E402
from impl.runner.attention_backend import (  # noqa: E402
    get_backend,
    native_missing,
    resolve_backend_name,
)
from impl.runner.attention_metadata import head_major, write_to_paged_cache  # noqa: E402
from impl.runner.native import NativeKernels, NativeUnavailable  # noqa: E402
from tests.runner.attention_cases import CASES, setup  # noqa: E402

CPU = torch.device("cpu")
MISSING = native_missing()
needs_native = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))


@pytest.fixture(scope="module")
def kernels() -> NativeKernels:
    return NativeKernels.load()


@needs_native
@pytest.mark.parametrize("block_size", [16, 5])
def test_write_kv_stores_what_the_torch_write_stores(kernels: NativeKernels,
                                                     block_size: int) -> None:
    gen = torch.Generator().manual_seed(block_size)
    pages = torch.randn(7, 2, 3, block_size, 8, generator=gen)  # head-major memory
    expected = head_major(pages.clone(), block_size)
    slots = torch.randperm(7 * block_size, generator=gen)[:11]
    key, value = torch.randn(2, 11, 3, 8, generator=gen)
    write_to_paged_cache(key, value, expected, slots)
    kernels.write_kv(key, value, pages, slots)
    assert torch.equal(head_major(pages, block_size), expected)


@needs_native
def test_write_kv_refuses_other_dtypes(kernels: NativeKernels) -> None:
    with pytest.raises(ValueError, match="needs fp32 keys"):
        kernels.write_kv(torch.zeros(1, 1, 4), torch.zeros(1, 1, 4),
                         torch.zeros(1, 2, 1, 4, 4, dtype=torch.float16),
                         torch.zeros(1, dtype=torch.int64))


@needs_native
def test_argmax_is_torchs_on_ties_nans_infinities_and_strided_rows(
        kernels: NativeKernels) -> None:
    gen = torch.Generator().manual_seed(3)
    wide = torch.randn(9, 700, generator=gen)
    logits = wide[:, :600]  # rows 700 floats apart
    logits[1, 5] = logits[1, 400] = 50.0  # a tie: the first wins
    logits[2, 17] = float("nan")  # torch answers the first NaN
    logits[2, 3] = 1e9
    logits[3] = float("-inf")  # all -inf: index 0
    logits[4, 599] = float("inf")
    logits[5] = 0.0
    logits[5, 7] = -0.0  # -0.0 == 0.0: still the first
    logits[6, 0] = float("nan")
    assert torch.equal(kernels.argmax_rows(logits), logits.argmax(dim=-1))
    with pytest.raises(ValueError, match="contiguous rows"):
        kernels.argmax_rows(wide.t())


@needs_native
def test_attention_refuses_a_too_short_block_table(kernels: NativeKernels) -> None:
    case = CASES["decode"]
    s = setup(case, "cpu")
    with pytest.raises(ValueError, match="longer than its block table"):
        kernels.paged_attention(s.query, s.kv_cache.transpose(2, 3), s.meta.query_start_loc,
                                s.meta.seq_lens, s.meta.block_table[:, :1], case.scale, 0, 0)
    with pytest.raises(ValueError, match="int32 block_table"):
        kernels.paged_attention(s.query, s.kv_cache.transpose(2, 3), s.meta.query_start_loc,
                                s.meta.seq_lens, s.meta.block_table.long(), case.scale, 0, 0)


@needs_native
def test_backend_falls_back_for_half_caches(kernels: NativeKernels) -> None:
    """A bf16 cache goes through the batched torch kernel: same numbers as the cpu backend."""
    case = CASES["mixed-ragged"]
    s = setup(case, "cpu")
    bf16 = head_major(s.kv_cache.transpose(2, 3).to(torch.bfloat16), case.block_size)
    torch.testing.assert_close(get_backend("native").attend(s.query, bf16, s.meta, case.scale),
                               get_backend("cpu").attend(s.query, bf16, s.meta, case.scale))


def test_library_is_named_by_its_source_and_built_once(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if MISSING is not None:
        pytest.skip(MISSING)
    built = native.build_library(tmp_path)
    assert built.parent == tmp_path and built.is_file()
    stamp = built.stat().st_mtime_ns
    assert native.build_library(tmp_path) == built and built.stat().st_mtime_ns == stamp
    edited = tmp_path / "kernels.c"
    edited.write_text(native.SOURCE.read_text() + "\n/* edited */\n")
    monkeypatch.setattr(native, "SOURCE", edited)
    assert native.library_path(tmp_path) != built  # an edit is never served stale


def test_a_failing_compiler_is_one_line_and_auto_falls_back(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "build_root", lambda: tmp_path)
    monkeypatch.setenv("CC", "false")  # on PATH, always fails
    with pytest.raises(NativeUnavailable, match="false failed on kernels.c"):
        native.build_library()
    assert resolve_backend_name("auto", CPU) == "cpu"
    with pytest.raises(ValueError, match="attention backend 'native': native kernels: false"):
        resolve_backend_name("native", CPU)
    assert not list(tmp_path.glob("*.so")) and not list(tmp_path.glob(".*.tmp"))


def test_auto_picks_native_on_cpu_where_it_builds() -> None:
    assert resolve_backend_name("auto", CPU) == ("native" if MISSING is None else "cpu")
    with pytest.raises(ValueError, match="attention backend 'native': needs the CPU device"):
        resolve_backend_name("native", torch.device("meta"))
