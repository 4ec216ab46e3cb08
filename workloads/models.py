"""Model description files: a model's layers for the KV-cache planner (`vtwin kv plan`).

    {"format": "vtwin-model", "name": "gemma-3-27b", "dtype": "bfloat16",
     "max_model_len": 131072, "description": "...",
     "layers": [{"repeat": 10, "layers": [LAYER, LAYER, ...]}, LAYER, ...]}

A LAYER is `{"type": "full" | "sliding_window" | "chunked_local", "num_kv_heads": H,
"head_size": D}` plus `"sliding_window": W` or `"attention_chunk_size": C` for its type, or
`{"type": "mamba", "state_shapes": [[...], ...], "state_dtypes": [...]}`; any layer may set
its own `"dtype"` (default: the model's). `{"repeat": K, "layers": [...]}` stands for its
layers K times over, and nests. Layers are named as upstream names them, by position after
expansion. Like workload files, the format is strict (unknown fields and `"5"` for 5 are
errors) and a bad file is one line naming the file and the field.

The bundled catalogue (`workloads/data/models/`, listed by `list_models()`) holds real models'
layer shapes, no weights. A workload's engine config may name one (`"model"`) instead of
listing `kv_cache_groups`: `plan_engine_groups` then takes the groups from the planner.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from impl.plan import PlanOptions
from impl.plan.layers import (
    LayerSpec,
    ModelSpec,
    attention_layer_name,
    cross_attention_layer_name,
    mamba_layer_name,
)
from impl.plan.planner import plan_groups
from vtwin.errors import UserError
from workloads.errors import WorkloadError, from_validation_error
from workloads.schema import EngineConfigModel, KVCacheGroupModel

FORMAT_NAME = "vtwin-model"
MODELS_DIR = Path(__file__).resolve().parent / "data" / "models"
MAX_LAYERS = 4096

PosInt = Annotated[int, Field(ge=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class LayerModel(_Strict):
    type: Literal["full", "sliding_window", "chunked_local", "mamba", "cross_attention"]
    num_kv_heads: PosInt | None = None
    head_size: PosInt | None = None
    sliding_window: PosInt | None = None
    attention_chunk_size: PosInt | None = None
    state_shapes: list[list[PosInt]] | None = None
    state_dtypes: list[str] | None = None
    dtype: str | None = None


class RepeatModel(_Strict):
    repeat: PosInt
    layers: Annotated[list[dict[str, Any]], Field(min_length=1)]


class ModelFileModel(_Strict):
    format: Literal["vtwin-model"]
    name: Annotated[str, Field(min_length=1, max_length=256)]
    dtype: str = "bfloat16"
    max_model_len: PosInt | None = None
    description: str = ""
    layers: Annotated[list[dict[str, Any]], Field(min_length=1)]


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A parsed description: the planner's `ModelSpec` and the file's suggested context."""

    spec: ModelSpec
    max_model_len: int | None
    description: str


def _layer(data: dict[str, Any], index: int, model_dtype: str, path: str,
           source: str) -> LayerSpec:
    try:
        rec = LayerModel.model_validate(data)
    except ValidationError as err:
        raise _relocated(from_validation_error(err, source, 0, path), source) from None
    kind = rec.type
    name = (mamba_layer_name(index) if kind == "mamba" else cross_attention_layer_name(index)
            if kind == "cross_attention" else attention_layer_name(index))
    try:
        return LayerSpec(
            name=name, kind=kind, num_kv_heads=rec.num_kv_heads or 0,
            head_size=rec.head_size or 0, dtype=rec.dtype or model_dtype,
            sliding_window=rec.sliding_window, attention_chunk_size=rec.attention_chunk_size,
            state_shapes=tuple(tuple(s) for s in rec.state_shapes or ()),
            state_dtypes=tuple(rec.state_dtypes or ()))
    except ValueError as err:
        field, _, problem = str(err).partition(": ")
        if kind != "mamba" and field in ("num_kv_heads", "head_size") and "must be" in problem:
            problem = "required for an attention layer"
        raise WorkloadError(source, None, f"{path}.{field}", problem) from None


def _expand(items: list[dict[str, Any]], path: str, model_dtype: str, source: str,
            out: list[LayerSpec]) -> None:
    for position, data in enumerate(items):
        where = f"{path}[{position}]"
        if not isinstance(data, dict):
            raise WorkloadError(source, None, where, f"expected an object (got {data!r:.40})")
        if "repeat" not in data:
            out.append(_layer(data, len(out), model_dtype, where, source))
            continue
        try:
            block = RepeatModel.model_validate(data)
        except ValidationError as err:
            raise _relocated(from_validation_error(err, source, 0, where), source) from None
        for _ in range(block.repeat):
            _expand(block.layers, f"{where}.layers", model_dtype, source, out)
            if len(out) > MAX_LAYERS:
                raise WorkloadError(source, None, f"{where}.repeat",
                                    f"expands to more than {MAX_LAYERS} layers")


def _relocated(err: WorkloadError, source: str) -> WorkloadError:
    """`from_validation_error` names a line; description files are located by field only."""
    return WorkloadError(source, None, err.field, err.problem)


def parse_model(data: Any, source: str = "<model>") -> ModelFile:
    if not isinstance(data, dict):
        raise WorkloadError(source, None, None, "expected a JSON object")
    if data.get("format") != FORMAT_NAME:
        raise WorkloadError(source, None, "format", f"not a vtwin model description: expected "
                            f"{FORMAT_NAME!r}, got {data.get('format')!r}")
    try:
        head = ModelFileModel.model_validate(data)
    except ValidationError as err:
        raise _relocated(from_validation_error(err, source, 0), source) from None
    layers: list[LayerSpec] = []
    _expand(head.layers, "layers", head.dtype, source, layers)
    try:
        spec = ModelSpec(head.name, tuple(layers), head.dtype)
    except ValueError as err:
        field, _, problem = str(err).partition(": ")
        raise WorkloadError(source, None, field, problem) from None
    return ModelFile(spec=spec, max_model_len=head.max_model_len, description=head.description)


def list_models() -> tuple[str, ...]:
    """Names of the bundled model descriptions."""
    return tuple(sorted(path.stem for path in MODELS_DIR.glob("*.json")))


def load_model(name_or_path: str | Path) -> ModelFile:
    """A bundled description by name, or the description file at a path."""
    path = Path(name_or_path)
    if not path.is_file():
        bundled = MODELS_DIR / f"{name_or_path}.json"
        if isinstance(name_or_path, Path) or not bundled.is_file():
            raise UserError(f"no model description file or bundled model named "
                            f"{str(name_or_path)!r} (bundled: {', '.join(list_models())})")
        path = bundled
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise WorkloadError(path, err.lineno, None, f"not valid JSON ({err.msg})") from None
    return parse_model(data, str(path))


def plan_engine_groups(config: EngineConfigModel, source: str | Path,
                       line: int) -> EngineConfigModel:
    """A workload config naming a model (`"model": NAME|FILE`): its KV-cache groups and block
    size from the planner, at the config's block size, prefix caching and limits, and the
    attention kernels of a GPU deployment (16-token kernel blocks). A file path is read
    relative to the workload file. `kv_cache_groups`, if also given, must be the plan's."""
    assert config.model is not None
    name = config.model
    beside = Path(source).parent / name
    try:
        spec = load_model(beside if beside.is_file() else name).spec
        options = PlanOptions(block_size=config.block_size,
                              max_model_len=config.max_model_len,
                              max_num_batched_tokens=config.max_num_batched_tokens,
                              async_scheduling=config.async_scheduling,
                              enable_prefix_caching=config.enable_prefix_caching)
        groups = plan_groups(spec, options)
    except (UserError, ValueError) as err:
        raise WorkloadError(source, line, "config.model", str(err)) from None
    sizes = sorted({group.spec.block_size for group in groups})
    if len(sizes) > 1:
        raise WorkloadError(source, line, "config.model", f"{name}: the plan gives groups block "
                            f"sizes {sizes}; scheduler workloads run one block size")
    planned = [KVCacheGroupModel(type=group.spec.kind,
                                 sliding_window=getattr(group.spec, "sliding_window", None),
                                 attention_chunk_size=getattr(group.spec, "attention_chunk_size",
                                                              None))
               for group in groups]
    if "kv_cache_groups" in config.model_fields_set and config.kv_cache_groups != planned:
        raise WorkloadError(source, line, "config.kv_cache_groups", f"{name}'s plan gives "
                            f"{[_group_json(g) for g in planned]}; leave "
                            "kv_cache_groups out or match it")
    return config.model_copy(update={"kv_cache_groups": planned, "block_size": sizes[0]})


__all__ = ["FORMAT_NAME", "ModelFile", "list_models", "load_model", "parse_model",
           "plan_engine_groups"]


def _group_json(group: KVCacheGroupModel) -> dict[str, object]:
    """A group as a workload file writes it: its type, then only the fields it sets."""
    return {"type": group.type,
            **group.model_dump(exclude_none=True, exclude_defaults=True, exclude={"type"})}
