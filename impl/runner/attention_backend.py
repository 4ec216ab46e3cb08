"""Choosing the attention backend: the torch reference anywhere, the Triton kernel on CUDA,
the batched CPU kernel (`attention_cpu`) on CPU.

A backend is a function (query, layer's kv cache, metadata, scale) -> output; all backends
read the cache the same way, and writing this step's keys and values is shared
(`write_to_paged_cache`), so they are interchangeable per run. The name is also the model's one
switch for CPU speed: under "cpu" the model's linear layers run on oneDNN-packed weights
(`cpu_linear`); the reference stays plain torch throughout.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from impl.runner.attention_cpu import cpu_paged_attention
from impl.runner.attention_metadata import AttentionMetadata
from impl.runner.attention_torch import torch_paged_attention
from impl.runner.attention_triton import interpreting, triton_available, triton_paged_attention

AttentionFn = Callable[[torch.Tensor, torch.Tensor, AttentionMetadata, float], torch.Tensor]
BACKENDS = ("auto", "torch", "triton", "cpu")


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_backend_name(name: str, device: torch.device) -> str:
    """'auto' picks Triton on CUDA when it is installed, the batched CPU kernel on CPU, else
    the torch reference. Triton on CPU tensors only works under the interpreter
    (TRITON_INTERPRET=1); the CPU kernel only takes CPU tensors."""
    if name not in BACKENDS:
        raise ValueError(f"attention backend: unknown {name!r} (known: {', '.join(BACKENDS)})")
    if name == "auto":
        if device.type == "cpu":
            return "cpu"
        return "triton" if device.type == "cuda" and triton_available() else "torch"
    if name == "cpu" and device.type != "cpu":
        raise ValueError(f"attention backend 'cpu': needs the CPU device, not {device.type}")
    if name == "triton":
        if not triton_available():
            raise ValueError("attention backend 'triton': the triton package is not installed")
        if device.type != "cuda" and not interpreting():
            raise ValueError("attention backend 'triton': needs a CUDA device "
                             "(or TRITON_INTERPRET=1 on CPU)")
    return name


def get_backend(name: str) -> AttentionFn:
    if name == "cpu":
        return cpu_paged_attention
    return triton_paged_attention if name == "triton" else torch_paged_attention
