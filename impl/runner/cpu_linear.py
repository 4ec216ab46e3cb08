"""Linear layers on CPU over weights reordered once, at load, into oneDNN's blocked layout.

`nn.Linear` on CPU hands each call to the BLAS with the weight in its [out, in] layout, and for
the small batches of decode steps that is slow: measured on 2 cores (fp32), the LM head
([32 x 256] . [256 x 8192]) took 1.5-2.2 ms through `F.linear` and 0.65 ms through oneDNN with
the weight reordered ahead (torch's own `mkldnn._reorder_linear_weight` /
`_linear_pointwise`, the pair Inductor uses for CPU linears); [32 x 256] . [256 x 1024] 144 us
against 94 us. Prefill-sized batches gain ~15%.

Only fp32 weights on a CPU with oneDNN are packed (bf16 needs AVX512-BF16 to be fast); a model
that cannot be packed keeps its `nn.Linear`s, which compute the same function.
"""

from __future__ import annotations

import torch
from torch import nn


def packing_available(dtype: torch.dtype) -> bool:
    return (dtype == torch.float32 and bool(torch._C._has_mkldnn)
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class PackedLinear(nn.Module):
    """y = x W^T + b with W held in oneDNN's layout (an opaque tensor, so not a parameter:
    pack after loading, and do not move the module to another device afterwards)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [num_tokens, in_features] -> [num_tokens, out_features]
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
            x.contiguous(), self.packed, self.bias, "none", [None], "")
        return out


def pack_linears(module: nn.Module) -> int:
    """Replace every CPU fp32 `nn.Linear` under `module` by a `PackedLinear`; how many."""
    packed = 0
    for name, child in list(module.named_children()):
        if (isinstance(child, nn.Linear) and child.weight.device.type == "cpu"
                and packing_available(child.weight.dtype)):
            setattr(module, name, PackedLinear(child))
            packed += 1
        else:
            packed += pack_linears(child)
    return packed
