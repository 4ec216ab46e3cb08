"""The native CPU kernels (`native/kernels.c`): built on first use when a C compiler is here,
loaded with ctypes.

Why C and ctypes rather than a torch extension: the kernels only need pointers, so the build
is one `cc` call of about a second with no torch headers, no ninja and no compiler cache, and
a call costs ~2 us. The shared library is named by the digest of its source and flags and
built into a scratch file that is renamed into place, so concurrent test workers never load a
half-written library and an edited source is never run stale. Where no compiler is found the
`native` backend is unavailable with the reason (`NativeUnavailable`) and `auto` picks the
batched torch kernel (`attention_cpu`) instead.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

SOURCE = Path(__file__).resolve().parent / "native" / "kernels.c"
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-shared", "-fPIC", "-std=c11")
I64, F32, PTR = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p


class NativeUnavailable(RuntimeError):
    """The native kernels cannot be built or loaded here; the message says why."""


def build_root() -> Path:
    """`build/native` beside the source tree when writable (a checkout), else a per-user
    directory under the system's temporary directory (an installed package)."""
    root = Path(__file__).resolve().parents[2] / "build" / "native"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK):
            return root
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"vtwin-native-{os.getuid()}"


def compiler() -> str:
    """The C compiler to use (CC, else Python's configured one, else cc)."""
    for candidate in (os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc"):
        if candidate and shutil.which(candidate.split()[0]):
            return candidate.split()[0]
    raise NativeUnavailable("native kernels: no C compiler on PATH (set CC, or install gcc)")


def library_path(root: Path) -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:16]
    return root / f"vtwin_kernels-{digest}-{sys.platform}-{os.uname().machine}.so"


def build_library(root: Path | None = None) -> Path:
    """Compile `kernels.c` unless a library of exactly this source and these flags exists."""
    target = library_path(root if root is not None else build_root())
    if target.is_file():
        return target
    cc = compiler()
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run([cc, *FLAGS, "-o", str(scratch), str(SOURCE), "-lm"],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            message = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise NativeUnavailable(f"native kernels: {cc} failed on {SOURCE.name}: {message}")
        scratch.replace(target)
    finally:
        scratch.unlink(missing_ok=True)
    return target


def _pointer(tensor: torch.Tensor) -> int:
    return int(tensor.data_ptr())


@dataclass(frozen=True)
class NativeKernels:
    """The loaded library, with typed entry points that check their tensors first."""

    library: ctypes.CDLL

    @classmethod
    def load(cls, root: Path | None = None) -> NativeKernels:
        library = ctypes.CDLL(str(build_library(root)))
        library.vtwin_paged_attention_f32.restype = ctypes.c_int
        library.vtwin_paged_attention_f32.argtypes = [
            PTR, PTR, PTR, I64, I64, PTR, PTR, I64, I64, I64, I64, I64, F32, I64, I64, I64, PTR]
        library.vtwin_write_kv_f32.restype = None
        library.vtwin_write_kv_f32.argtypes = [PTR, PTR, PTR, I64, I64, I64, I64, PTR]
        library.vtwin_argmax_rows_f32.restype = None
        library.vtwin_argmax_rows_f32.argtypes = [PTR, I64, I64, I64, PTR]
        return cls(library)

    def paged_attention(self, query: torch.Tensor, pages: torch.Tensor,
                        query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                        block_table: torch.Tensor, scale: float, window: int,
                        chunk: int) -> torch.Tensor:
        """Attention of every query token over its request's visible keys, read in place."""
        # query: [tokens, heads, d] fp32; pages: [num_blocks, 2, kv_heads, block, d] fp32;
        # query_start_loc: [R + 1] int32; seq_lens: [R] int32; block_table: [R, max_pages]
        _check(query, pages, query_start_loc, seq_lens, block_table)
        query = query.contiguous()
        out = torch.empty_like(query)  # [tokens, heads, d]
        kv_heads, block, head_dim = pages.shape[2:]
        status = self.library.vtwin_paged_attention_f32(
            _pointer(query), _pointer(pages), _pointer(block_table), block_table.shape[1],
            block_table.stride(0),
            _pointer(query_start_loc), _pointer(seq_lens), seq_lens.shape[0],
            query.shape[1], kv_heads, block, head_dim, scale, window, chunk,
            torch.get_num_threads(), _pointer(out))
        if status == -2:
            raise MemoryError("native attention: no memory for the scores")
        if status != 0:
            raise ValueError("native attention: a sequence is longer than its block table "
                             f"row ({block_table.shape[1]} pages of {block}) or the heads "
                             f"({query.shape[1]}) are not a multiple of {kv_heads} KV heads")
        return out

    def write_kv(self, key: torch.Tensor, value: torch.Tensor, pages: torch.Tensor,
                 slot_mapping: torch.Tensor) -> None:
        """Store this step's keys and values at their slots."""
        # key, value: [tokens, kv_heads, d] fp32; slot_mapping: [tokens] int64
        key, value = key.contiguous(), value.contiguous()
        if not (key.dtype == value.dtype == pages.dtype == torch.float32
                and slot_mapping.dtype == torch.int64 and slot_mapping.is_contiguous()
                and pages.is_contiguous()):
            raise ValueError("native write_kv: needs fp32 keys, values and pages (contiguous) "
                             "and int64 slots")
        kv_heads, block, head_dim = pages.shape[2:]
        self.library.vtwin_write_kv_f32(_pointer(key), _pointer(value), _pointer(slot_mapping),
                                        key.shape[0], kv_heads, block, head_dim,
                                        _pointer(pages))

    def argmax_rows(self, logits: torch.Tensor) -> torch.Tensor:
        """torch.argmax(logits, dim=-1) for 2-D fp32 CPU logits with unit column stride."""
        # logits: [rows, vocab] -> [rows] int64
        if logits.dtype != torch.float32 or logits.dim() != 2 or logits.stride(1) != 1:
            raise ValueError("native argmax: needs 2-D fp32 logits with contiguous rows")
        out = torch.empty(logits.shape[0], dtype=torch.int64)
        self.library.vtwin_argmax_rows_f32(_pointer(logits), logits.shape[0], logits.shape[1],
                                           logits.stride(0), _pointer(out))
        return out


def _check(query: torch.Tensor, pages: torch.Tensor, query_start_loc: torch.Tensor,
           seq_lens: torch.Tensor, block_table: torch.Tensor) -> None:
    problems = []
    if query.dtype != torch.float32 or pages.dtype != torch.float32:
        problems.append(f"fp32 query and cache (got {query.dtype}, {pages.dtype})")
    if query.device.type != "cpu" or pages.device.type != "cpu":
        problems.append("CPU tensors")
    if not pages.is_contiguous():
        problems.append("a contiguous head-major cache")
    for name, tensor in (("query_start_loc", query_start_loc), ("seq_lens", seq_lens),
                         ("block_table", block_table)):
        if tensor.dtype != torch.int32 or tensor.stride(-1) != 1:
            problems.append(f"int32 {name} with unit stride")
    if problems:
        raise ValueError("native attention: needs " + "; ".join(problems))
