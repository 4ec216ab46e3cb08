"""Config parsing and checkpoint validation: bad directories fail with one line naming what is
wrong (missing file, wrong shape, unsupported architecture)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")
pytest.importorskip("safetensors", reason="checkpoint loading needs safetensors")

from safetensors.torch import load_file, save_file  # noqa: E402

from impl.runner.config import load_model_config, parse_model_config  # noqa: E402
from impl.runner.model import LlamaForCausalLM  # noqa: E402

CPU = torch.device("cpu")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _error(model_dir: Path) -> str:
    with pytest.raises(ValueError) as info:
        LlamaForCausalLM.from_pretrained(model_dir, CPU)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_parses_the_transformers_config(tiny_model_dir: Path) -> None:
    config = load_model_config(tiny_model_dir)
    assert (config.hidden_size, config.num_attention_heads, config.num_key_value_heads) == (
        128, 4, 2)
    assert config.head_dim == 32 and config.num_queries_per_kv == 2
    assert config.rope.theta == 10000.0 and config.rope.rope_type == "default"
    assert config.eos_token_id == 2 and config.dtype == "float32"


def test_legacy_rope_fields_and_defaults() -> None:
    config = parse_model_config({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
        "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
        "torch_dtype": "bfloat16", "eos_token_id": [7, 8]})
    assert config.num_key_value_heads == 2 and config.head_dim == 4
    assert config.rope.theta == 500000.0 and config.rope.rope_type == "llama3"
    assert config.dtype == "bfloat16" and config.eos_token_id == 7


def test_missing_directory_and_config(tmp_path: Path) -> None:
    assert "not a directory" in _error(tmp_path / "nope")
    assert "config.json: missing" in _error(tmp_path)


def test_invalid_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    assert "not valid JSON" in _error(tmp_path)


def test_unsupported_architecture(tiny_model_dir: Path, tmp_path: Path) -> None:
    model_dir = _copy(tiny_model_dir, tmp_path / "m")
    raw = json.loads((model_dir / "config.json").read_text())
    raw["architectures"] = ["MistralForCausalLM"]
    (model_dir / "config.json").write_text(json.dumps(raw))
    assert "unsupported architecture ['MistralForCausalLM']" in _error(model_dir)


def test_unsupported_rope_type() -> None:
    with pytest.raises(ValueError, match="unsupported rope_type 'yarn'"):
        parse_model_config({"architectures": ["LlamaForCausalLM"], "vocab_size": 10,
                            "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
                            "num_attention_heads": 2, "rope_parameters": {"rope_type": "yarn"}})


def test_missing_weights_file(tiny_model_dir: Path, tmp_path: Path) -> None:
    model_dir = _copy(tiny_model_dir, tmp_path / "m")
    (model_dir / "model.safetensors").unlink()
    assert "no *.safetensors weight file" in _error(model_dir)


def test_wrong_shape_names_the_tensor(tiny_model_dir: Path, tmp_path: Path) -> None:
    model_dir = _copy(tiny_model_dir, tmp_path / "m")
    tensors = load_file(str(model_dir / "model.safetensors"))
    tensors["model.layers.1.self_attn.k_proj.weight"] = torch.zeros(16, 128)
    save_file(tensors, str(model_dir / "model.safetensors"))
    message = _error(model_dir)
    assert "model.layers.1.self_attn.k_proj.weight has shape [16, 128]" in message
    assert "[64, 128]" in message


def test_missing_tensor(tiny_model_dir: Path, tmp_path: Path) -> None:
    model_dir = _copy(tiny_model_dir, tmp_path / "m")
    tensors = load_file(str(model_dir / "model.safetensors"))
    del tensors["model.norm.weight"]
    save_file(tensors, str(model_dir / "model.safetensors"))
    assert "missing tensor model.norm.weight" in _error(model_dir)


def test_corrupt_weights_file(tiny_model_dir: Path, tmp_path: Path) -> None:
    model_dir = _copy(tiny_model_dir, tmp_path / "m")
    (model_dir / "model.safetensors").write_bytes(b"garbage")
    assert "unreadable safetensors file" in _error(model_dir)
