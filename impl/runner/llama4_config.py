"""The Llama 4 text model's `config.json` fields, as `ModelConfig` keyword arguments.

Llama 4 interleaves two kinds of decoder layer: most apply RoPE and attend only within their
chunk of `attention_chunk_size` tokens ("chunked_attention"); every `no_rope_layer_interval`-th
(by default) applies no RoPE and attends to everything ("full_attention"), optionally with its
queries scaled up at long positions (temperature tuning). RoPE rotates adjacent pairs, and the
MLP is called `feed_forward`. Only dense checkpoints are supported: a layer listed in
`moe_layers` is refused here, naming the field.
"""

from __future__ import annotations

from typing import Any

LAYER_TYPES = ("chunked_attention", "full_attention")


def llama4_fields(raw: dict[str, Any]) -> dict[str, Any]:
    layers = int(raw["num_hidden_layers"])
    moe = raw.get("moe_layers")
    if moe is None or list(moe):
        raise ValueError(f"config.json: moe_layers {moe!r}: Llama 4 MoE layers are not "
                         "supported (a dense checkpoint sets moe_layers to [])")
    interval = int(raw.get("no_rope_layer_interval", 4))
    rope = [bool(x) for x in raw.get("no_rope_layers") or
            [(i + 1) % interval != 0 for i in range(layers)]]
    types = list(raw.get("layer_types") or
                 ["chunked_attention" if r else "full_attention" for r in rope])
    for name, values in (("no_rope_layers", rope), ("layer_types", types)):
        if len(values) != layers:
            raise ValueError(f"config.json: {name} has {len(values)} entries for "
                             f"{layers} layers")
    bad = sorted(set(types) - set(LAYER_TYPES))
    if bad:
        raise ValueError(f"config.json: layer_types: unsupported {bad} "
                         f"(supported: {', '.join(LAYER_TYPES)})")
    chunk = int(raw.get("attention_chunk_size") or 0)
    chunked = [t == "chunked_attention" for t in types]
    if any(chunked) and chunk < 1:
        raise ValueError("config.json: attention_chunk_size must be >= 1 for "
                         "chunked_attention layers")
    return {
        "architecture": "Llama4ForCausalLM",
        "intermediate_size": int(raw.get("intermediate_size_mlp", raw["intermediate_size"])),
        "attention_chunk_size": chunk if any(chunked) else 0,
        "chunked_layers": tuple(chunked), "rope_layers": tuple(rope),
        "rope_interleaved": True, "use_qk_norm": bool(raw.get("use_qk_norm", True)),
        "attn_temperature_tuning": bool(raw.get("attn_temperature_tuning", True)),
        "floor_scale": int(raw.get("floor_scale", 8192)),
        "attn_scale": float(raw.get("attn_scale", 0.1)),
        "rms_norm_eps": float(raw.get("rms_norm_eps", 1e-5)),
        "mlp_prefix": "feed_forward",
    }
