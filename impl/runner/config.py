"""`ModelConfig`: the part of a Hugging Face `config.json` a Llama-family model needs.

Parsed and validated once, so the model code can trust every field. Anything the model cannot
honour (another architecture, an unknown RoPE scaling, a non-SiLU activation, Llama 4's MoE
layers) is refused here with a one-line `ValueError` naming the field, instead of producing
wrong tokens later. Llama 4's text model (dense layers only) adds per-layer attention: chunked
local attention with RoPE on most layers, full attention without RoPE on the others
(`impl.runner.llama4_config`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impl.runner.llama4_config import llama4_fields

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Llama4ForCausalLM")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True, slots=True)
class RopeConfig:
    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True, slots=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = RopeConfig()
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    dtype: str = "float32"
    eos_token_id: int | None = None
    architecture: str = "LlamaForCausalLM"
    attention_chunk_size: int = 0  # tokens per chunk of the chunked local layers (0: none)
    chunked_layers: tuple[bool, ...] = ()  # per layer: chunked local attention (empty: none)
    rope_layers: tuple[bool, ...] = ()  # per layer: applies RoPE (empty: every layer does)
    rope_interleaved: bool = False  # RoPE rotates pairs (2i, 2i + 1), not the two halves
    use_qk_norm: bool = False  # L2-normalise q and k after RoPE, on RoPE layers
    attn_temperature_tuning: bool = False  # scale queries of no-RoPE layers up with position
    floor_scale: int = 8192
    attn_scale: float = 0.1
    mlp_prefix: str = "mlp"  # the checkpoint's name for the MLP ("feed_forward" in Llama 4)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim",
                     "max_position_embeddings"):
            if getattr(self, name) < 1:
                raise ValueError(f"config.json: {name} must be >= 1 (got {getattr(self, name)})")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"config.json: num_attention_heads {self.num_attention_heads} is not "
                             f"a multiple of num_key_value_heads {self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ValueError(f"config.json: head_dim must be even for RoPE (got {self.head_dim})")
        if self.dtype not in _DTYPES:
            raise ValueError(f"config.json: dtype must be one of {_DTYPES} (got {self.dtype!r})")

    @property
    def num_queries_per_kv(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    def layer_name(self, index: int) -> str:
        """The KV-cache layer name of decoder layer `index` (the names a KVCacheConfig uses)."""
        return f"model.layers.{index}.self_attn.attn"

    def uses_rope(self, index: int) -> bool:
        return not self.rope_layers or self.rope_layers[index]

    def is_chunked(self, index: int) -> bool:
        """Layer `index` attends only within its chunk of `attention_chunk_size` tokens."""
        return bool(self.chunked_layers) and self.chunked_layers[index]


def _rope_from(raw: dict[str, Any]) -> RopeConfig:
    """transformers >= 5 writes `rope_parameters`; older files `rope_theta` + `rope_scaling`."""
    params = dict(raw.get("rope_scaling") or {})
    params.update(raw.get("rope_parameters") or {})
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    rope_type = str(params.get("rope_type", params.get("type", "default")))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(f"config.json: unsupported rope_type {rope_type!r} "
                         f"(supported: {', '.join(SUPPORTED_ROPE_TYPES)})")
    return RopeConfig(
        theta=theta, rope_type=rope_type, factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(
            params.get("original_max_position_embeddings", 8192)),
    )


def _first_eos(value: Any) -> int | None:
    if isinstance(value, list):
        return int(value[0]) if value else None
    return None if value is None else int(value)


def parse_model_config(raw: dict[str, Any]) -> ModelConfig:
    architectures = raw.get("architectures") or []
    if not any(arch in SUPPORTED_ARCHITECTURES for arch in architectures):
        raise ValueError(f"config.json: unsupported architecture {architectures!r} "
                         f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"config.json: unsupported hidden_act {act!r} (only 'silu')")
    missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size",
                           "num_hidden_layers", "num_attention_heads") if k not in raw]
    if missing:
        raise ValueError(f"config.json: missing field(s) {', '.join(missing)}")
    heads = int(raw["num_attention_heads"])
    hidden = int(raw["hidden_size"])
    fields: dict[str, Any] = dict(
        vocab_size=int(raw["vocab_size"]), hidden_size=hidden,
        intermediate_size=int(raw["intermediate_size"]),
        num_hidden_layers=int(raw["num_hidden_layers"]), num_attention_heads=heads,
        num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or hidden // heads),
        max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), rope=_rope_from(raw),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        attention_bias=bool(raw.get("attention_bias", False)),
        mlp_bias=bool(raw.get("mlp_bias", False)),
        dtype=str(raw.get("dtype") or raw.get("torch_dtype") or "float32"),
        eos_token_id=_first_eos(raw.get("eos_token_id")),
    )
    if "Llama4ForCausalLM" in architectures:
        fields.update(llama4_fields(raw))
    return ModelConfig(**fields)


def load_model_config(model_dir: str | Path) -> ModelConfig:
    path = Path(model_dir)
    if not path.is_dir():
        raise ValueError(f"{path}: not a directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{config_file}: missing (a checkpoint directory needs config.json)")
    try:
        raw = json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{config_file}: not valid JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{config_file}: expected a JSON object")
    return parse_model_config(raw)
