"""Choosing the attention backend: the torch reference anywhere, the Triton kernel on CUDA,
the batched torch kernel (`attention_cpu`) or the native C kernels (`native`) on CPU.

A backend writes a step's keys and values into the paged cache and attends over it; all
backends read and write the same layout, so they are interchangeable per run. It also picks
the greedy argmax, and its name is the model's one switch for CPU speed: under "cpu" and
"native" the model's linear layers run on oneDNN-packed weights (`cpu_linear`); the reference
stays plain torch throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from impl.runner.attention_cpu import cpu_paged_attention
from impl.runner.attention_metadata import AttentionMetadata, write_to_paged_cache
from impl.runner.attention_torch import torch_paged_attention
from impl.runner.attention_triton import interpreting, triton_available, triton_paged_attention
from impl.runner.native import NativeKernels, NativeUnavailable

AttentionFn = Callable[[torch.Tensor, torch.Tensor, AttentionMetadata, float], torch.Tensor]
WriteFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]
ArgmaxFn = Callable[[torch.Tensor], torch.Tensor]
BACKENDS = ("auto", "torch", "triton", "cpu", "native")
PACKED_LINEARS = ("cpu", "native")
"""Backends under which the model's linear layers run on oneDNN-packed weights."""


def torch_argmax(logits: torch.Tensor) -> torch.Tensor:
    # logits: [rows, vocab] -> [rows]
    return logits.argmax(dim=-1)


@dataclass(frozen=True, slots=True)
class AttentionBackend:
    name: str
    attend: AttentionFn
    write: WriteFn = write_to_paged_cache
    argmax: ArgmaxFn = torch_argmax


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def native_missing() -> str | None:
    """Why the native kernels cannot run here (no compiler, a failed build), or None."""
    try:
        NativeKernels.load()
    except (NativeUnavailable, OSError) as error:
        return str(error)
    return None


def resolve_backend_name(name: str, device: torch.device) -> str:
    """'auto' picks Triton on CUDA when it is installed; on CPU the native kernels when they
    build here, else the batched torch kernel; otherwise the torch reference. Triton on CPU
    tensors only works under the interpreter (TRITON_INTERPRET=1); the CPU kernels only take
    CPU tensors. Naming "native" where it cannot build is an error, never a quiet fallback."""
    if name not in BACKENDS:
        raise ValueError(f"attention backend: unknown {name!r} (known: {', '.join(BACKENDS)})")
    if name == "auto":
        if device.type == "cpu":
            return "cpu" if native_missing() is not None else "native"
        return "triton" if device.type == "cuda" and triton_available() else "torch"
    if name in ("cpu", "native") and device.type != "cpu":
        raise ValueError(f"attention backend {name!r}: needs the CPU device, not {device.type}")
    if name == "native" and (missing := native_missing()) is not None:
        raise ValueError(f"attention backend 'native': {missing}")
    if name == "triton":
        if not triton_available():
            raise ValueError("attention backend 'triton': the triton package is not installed")
        if device.type != "cuda" and not interpreting():
            raise ValueError("attention backend 'triton': needs a CUDA device "
                             "(or TRITON_INTERPRET=1 on CPU)")
    return name


def get_backend(name: str) -> AttentionBackend:
    if name == "native":
        return native_backend(NativeKernels.load())
    if name == "cpu":
        return AttentionBackend(name, cpu_paged_attention)
    return AttentionBackend(name, triton_paged_attention if name == "triton"
                            else torch_paged_attention)


def native_backend(kernels: NativeKernels) -> AttentionBackend:
    """The C kernels for fp32 caches; an fp16/bf16 cache goes through the batched torch
    kernel (`attention_cpu`), which the C code does not cover."""

    def attend(query: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata,
               scale: float) -> torch.Tensor:
        # query: [tokens, heads, d]; kv_cache: [num_blocks, 2, block_size, kv_heads, d]
        if kv_cache.dtype != torch.float32:
            return cpu_paged_attention(query, kv_cache, meta, scale)
        return kernels.paged_attention(query.float(), kv_cache.transpose(2, 3),
                                       meta.query_start_loc, meta.seq_lens, meta.block_table,
                                       scale, meta.sliding_window,
                                       meta.attention_chunk_size).to(query.dtype)

    def write(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
              slot_mapping: torch.Tensor) -> None:
        if kv_cache.dtype != torch.float32 or key.dtype != torch.float32:
            write_to_paged_cache(key, value, kv_cache, slot_mapping)
        else:
            kernels.write_kv(key, value, kv_cache.transpose(2, 3), slot_mapping)

    def argmax(logits: torch.Tensor) -> torch.Tensor:
        if logits.dtype != torch.float32 or logits.dim() != 2 or logits.stride(1) != 1:
            return torch_argmax(logits)
        return kernels.argmax_rows(logits)

    return AttentionBackend("native", attend, write, argmax)
