"""The CPU fast path's pieces: oneDNN-packed linears against `nn.Linear`, the fused q/k/v and
gate/up projections against the checkpoint's separate tensors, and how "auto" picks it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")

from impl.runner.attention_backend import resolve_backend_name  # noqa: E402
from impl.runner.config import parse_model_config  # noqa: E402
from impl.runner.cpu_linear import PackedLinear, pack_linears, packing_available  # noqa: E402
from impl.runner.weights import expected_shapes, fuse_projections  # noqa: E402

CPU = torch.device("cpu")
needs_onednn = pytest.mark.skipif(not packing_available(torch.float32),
                                  reason="this torch build has no oneDNN linear packing")


@needs_onednn
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_packed_linear_computes_the_linear(bias: bool, rows: int) -> None:
    gen = torch.Generator().manual_seed(rows)
    linear = torch.nn.Linear(48, 80, bias=bias)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(80, 48, generator=gen))
        if bias:
            linear.bias.copy_(torch.randn(80, generator=gen))
    x = torch.randn(rows, 48, generator=gen)
    with torch.inference_mode():
        packed = PackedLinear(linear)(x)
        torch.testing.assert_close(packed, linear(x), atol=1e-4, rtol=1e-5)
        # a non-contiguous input (a column slice) is the same function
        wide = torch.randn(rows, 96, generator=gen)
        torch.testing.assert_close(PackedLinear(linear)(wide[:, ::2]), linear(wide[:, ::2]),
                                   atol=1e-4, rtol=1e-5)


@needs_onednn
def test_pack_linears_replaces_only_cpu_fp32_linears() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(4, 2)),
                                torch.nn.Linear(2, 2).to(torch.float64))
    assert pack_linears(model) == 2
    assert isinstance(model[0], PackedLinear) and isinstance(model[2][0], PackedLinear)
    assert isinstance(model[3], torch.nn.Linear)
    assert not packing_available(torch.bfloat16)


def test_fuse_projections_concatenates_rows_in_order() -> None:
    config = parse_model_config({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 12,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
        "vocab_size": 16, "attention_bias": True})
    shapes = expected_shapes(config)
    weights = {name: torch.randn(shape) for name, shape in shapes.items()}
    fused = fuse_projections(weights, config)
    for n in range(2):
        p = f"model.layers.{n}."
        for kind in ("weight", "bias"):
            assert torch.equal(fused[f"{p}self_attn.qkv_proj.{kind}"], torch.cat([
                weights[f"{p}self_attn.{x}_proj.{kind}"] for x in "qkv"]))
            assert f"{p}self_attn.q_proj.{kind}" not in fused
        assert torch.equal(fused[f"{p}mlp.gate_up_proj.weight"], torch.cat([
            weights[f"{p}mlp.gate_proj.weight"], weights[f"{p}mlp.up_proj.weight"]]))
        assert f"{p}mlp.gate_up_proj.bias" not in fused  # the checkpoint has no MLP bias
    assert fused["model.norm.weight"] is weights["model.norm.weight"]


def test_the_cpu_kernel_is_for_cpu_only() -> None:
    """(What "auto" picks on CPU, native or this one, is in test_native.py.)"""
    assert resolve_backend_name("cpu", CPU) == "cpu"
    assert resolve_backend_name("torch", CPU) == "torch"
    with pytest.raises(ValueError, match="attention backend 'cpu': needs the CPU device"):
        resolve_backend_name("cpu", torch.device("meta"))
