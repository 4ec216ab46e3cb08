"""Workloads for vtwin: a versioned file format, generators and public-trace replays.

The rest of vtwin uses this API:

* `load(name_or_path)`: a bundled workload by name (`list_workloads()`) or a workload file;
* `dump(workload, path)` / `dumps(workload)`: canonical, deterministic JSONL;
* `generate(family, seed, scale)`: a fresh workload from a generator family (`FAMILIES`);
* `from_trace(fmt, path, options)`: replay a Mooncake or Azure trace file.

See `workloads.schema` for the file format and `workloads.model` for the records.
"""

from workloads.errors import WorkloadError
from workloads.generators import FAMILIES, generate
from workloads.loader import load_file, loads
from workloads.model import (
    AbortSpec,
    EngineConfig,
    KVCacheGroup,
    PlanSpec,
    PromptSpec,
    RequestSpec,
    Segment,
    Workload,
)
from workloads.registry import list_workloads, load
from workloads.schema import FORMAT_NAME, FORMAT_VERSION
from workloads.stats import Summary, prefix_sharing, summarize
from workloads.traces import ReplayOptions, from_trace
from workloads.writer import dump, dumps

__all__ = [
    "FAMILIES",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "AbortSpec",
    "EngineConfig",
    "KVCacheGroup",
    "PlanSpec",
    "PromptSpec",
    "ReplayOptions",
    "RequestSpec",
    "Segment",
    "Summary",
    "Workload",
    "WorkloadError",
    "dump",
    "dumps",
    "from_trace",
    "generate",
    "list_workloads",
    "load",
    "load_file",
    "loads",
    "prefix_sharing",
    "summarize",
]
