"""Model description files: the bundled catalogue expands to the layer patterns it names, and a
bad file is one `FILE: field 'path': problem` line."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from vtwin.errors import UserError
from workloads.errors import WorkloadError
from workloads.models import list_models, load_model, parse_model


def kinds(name: str) -> str:
    """The layer types in order, one letter each: F(ull), S(liding), C(hunked), M(amba)."""
    letter = {"full": "F", "sliding_window": "S", "chunked_local": "C", "mamba": "M"}
    return "".join(letter[layer.kind] for layer in load_model(name).spec.layers)


def test_catalogue_holds_the_issue_models() -> None:
    assert set(list_models()) >= {"llama-3-8b", "gemma-3-27b", "gpt-oss-20b", "llama-4-scout",
                                  "jamba-v0.1", "bamba-9b", "qwen3-next-80b", "ministral-8b"}


def test_catalogue_patterns() -> None:
    assert kinds("llama-3-8b") == "F" * 32
    assert kinds("gemma-3-27b") == "SSSSSF" * 10 + "SS"
    assert kinds("gpt-oss-20b") == "SF" * 12
    assert kinds("llama-4-scout") == "CCCF" * 12
    assert kinds("jamba-v0.1") == "MMMMFMMM" * 4
    assert kinds("bamba-9b") == "M" * 9 + "F" + "M" * 8 + "F" + "M" * 8 + "F" + "M" * 4
    assert kinds("qwen3-next-80b") == "MMMF" * 12
    assert kinds("ministral-8b") == "FSSS" * 9


def test_layers_are_named_like_upstream_modules() -> None:
    layers = load_model("jamba-v0.1").spec.layers
    assert [layer.name for layer in layers[3:6]] == [
        "model.layers.3.mixer", "model.layers.4.self_attn.attn", "model.layers.5.mixer"]
    assert layers[0].state_bytes == 8192 * 3 * 2 + 8192 * 16 * 2
    scout = load_model("llama-4-scout")
    assert scout.max_model_len == 131072
    assert scout.spec.layers[0].attention_chunk_size == 8192


def model(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"format": "vtwin-model", "name": "m", "layers": [
        {"type": "full", "num_kv_heads": 8, "head_size": 128},
        {"repeat": 2, "layers": [{"type": "sliding_window", "num_kv_heads": 8,
                                  "head_size": 128, "sliding_window": 64}]}]}
    return {**base, **changes}


def test_repeat_expands_in_place_and_layers_inherit_the_model_dtype() -> None:
    spec = parse_model(model(dtype="float16")).spec
    assert Counter(layer.kind for layer in spec.layers) == {"full": 1, "sliding_window": 2}
    assert {layer.dtype for layer in spec.layers} == {"float16"}


@pytest.mark.parametrize(("change", "message"), [
    ({"format": "vtwin-workload"},
     "m.json: field 'format': not a vtwin model description: expected 'vtwin-model', got "
     "'vtwin-workload'"),
    ({"layers": []}, "m.json: field 'layers': List should have at least 1 item after "
                     "validation, not 0 (got [])"),
    ({"layers": [{"type": "sliding_window", "num_kv_heads": 8, "head_size": 128}]},
     "m.json: field 'layers[0].sliding_window': needed for a 'sliding_window' layer"),
    ({"layers": [{"type": "full", "head_size": 128}]},
     "m.json: field 'layers[0].num_kv_heads': required for an attention layer"),
    ({"layers": [{"type": "full", "num_kv_heads": "8", "head_size": 128}]},
     "m.json: field 'layers[0].num_kv_heads': Input should be a valid integer (got '8')"),
    ({"layers": [{"repeat": 2, "layers": [{"type": "mamba", "state_shapes": [[4, 0]],
                                            "state_dtypes": ["float32"]}]}]},
     "m.json: field 'layers[0].layers[0].state_shapes[0][1]': Input should be greater than or "
     "equal to 1 (got 0)"),
    ({"layers": [{"type": "mamba", "state_shapes": [[4]], "state_dtypes": ["fp4"]}]},
     "m.json: field 'layers[0].state_dtypes[0]': unknown dtype 'fp4' (known: float32, "
     "float16, bfloat16, float8_e4m3fn, float8_e5m2)"),
    ({"layers": [{"type": "full", "num_kv_heads": 8, "head_size": 128, "window": 4}]},
     "m.json: field 'layers[0].window': unknown field"),
    ({"layers": [{"repeat": 5000, "layers": [{"type": "full", "num_kv_heads": 1,
                                              "head_size": 8}]}]},
     "m.json: field 'layers[0].repeat': expands to more than 4096 layers"),
])
def test_a_bad_file_is_one_line_naming_the_field(tmp_path: Path, change: dict[str, Any],
                                                 message: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model(**change)))
    with pytest.raises(WorkloadError) as err:
        load_model(str(path))
    assert str(err.value) == f"{tmp_path}/{message}"
    assert "\n" not in str(err.value)


def test_unknown_names_list_the_catalogue(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no model description file or bundled model named "
                       "'gpt-5' \\(bundled: bamba-9b, "):
        load_model("gpt-5")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(WorkloadError, match="bad.json:1: not valid JSON"):
        load_model(bad)
