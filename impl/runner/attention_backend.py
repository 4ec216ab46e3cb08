"""Choosing the attention backend: the torch reference anywhere, the Triton kernel on CUDA.

A backend is a function (query, layer's kv cache, metadata, scale) -> output; both backends
read the cache the same way, and writing this step's keys and values is shared
(`write_to_paged_cache`), so they are interchangeable per run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from impl.runner.attention_metadata import AttentionMetadata
from impl.runner.attention_torch import torch_paged_attention
from impl.runner.attention_triton import interpreting, triton_available, triton_paged_attention

AttentionFn = Callable[[torch.Tensor, torch.Tensor, AttentionMetadata, float], torch.Tensor]
BACKENDS = ("auto", "torch", "triton")


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_backend_name(name: str, device: torch.device) -> str:
    """'auto' picks Triton on CUDA when it is installed, else the torch reference. Triton on
    CPU tensors only works under the interpreter (TRITON_INTERPRET=1)."""
    if name not in BACKENDS:
        raise ValueError(f"attention backend: unknown {name!r} (known: {', '.join(BACKENDS)})")
    if name == "auto":
        return "triton" if device.type == "cuda" and triton_available() else "torch"
    if name == "triton":
        if not triton_available():
            raise ValueError("attention backend 'triton': the triton package is not installed")
        if device.type != "cuda" and not interpreting():
            raise ValueError("attention backend 'triton': needs a CUDA device "
                             "(or TRITON_INTERPRET=1 on CPU)")
    return name


def get_backend(name: str) -> AttentionFn:
    return triton_paged_attention if name == "triton" else torch_paged_attention
