"""What every suite shares: the benchmark harness, loaded from this checkout, and a memo.

asv installs the *commit under test* into its environment and imports these suites from the
working tree. The harness (`conformance/bench`) is part of the benchmarks, not of the code
under test, and older commits do not ship it, so it is loaded from the tree by path under a
private name (`vtwin_bench`); `impl`, `workloads` and `vllm` still come from the environment.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Hashable
from pathlib import Path
from types import ModuleType
from typing import Any

HARNESS_DIR = Path(__file__).resolve().parent.parent / "conformance" / "bench"
HARNESS_NAME = "vtwin_bench"

ORACLE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
              "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "ERROR",
              "TOKENIZERS_PARALLELISM": "false"}
for _key, _value in ORACLE_ENV.items():  # before anything imports torch or vllm
    os.environ.setdefault(_key, _value)
logging.getLogger("vllm").setLevel(logging.ERROR)  # its warnings would flood asv's log


def _load_harness() -> ModuleType:
    if HARNESS_NAME in sys.modules:
        return sys.modules[HARNESS_NAME]
    spec = importlib.util.spec_from_file_location(
        HARNESS_NAME, HARNESS_DIR / "__init__.py", submodule_search_locations=[str(HARNESS_DIR)])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the benchmark harness from {HARNESS_DIR}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[HARNESS_NAME] = module
    spec.loader.exec_module(module)
    return module


def _preload_oracle() -> None:
    """Import upstream's scheduler-side modules once, if installed.

    asv (launch_method "forkserver" in asv.conf.json) forks every benchmark process from a
    server that has imported these suites, so anything imported here is paid once per run
    instead of once per parameter combination: `import vllm` costs 5-25 s on a small box, and
    the suites have ~80 combinations. The harness itself keeps every vLLM import lazy; this is
    only a warm cache, taken only when asv is the importer. Both systems' processes inherit it
    alike, so baselines stay equal.
    """
    try:
        import vllm.config  # noqa: F401
        import vllm.v1.core.block_pool  # noqa: F401
        import vllm.v1.core.sched.scheduler  # noqa: F401
        import vllm.v1.request  # noqa: F401
    except ImportError:
        pass


harness = _load_harness()
if "asv_runner" in sys.modules:  # inside asv only: tests and tools import these suites cold
    _preload_oracle()
SYSTEMS: list[str] = list(harness.SYSTEMS)


def submodule(name: str) -> Any:
    return importlib.import_module(f"{HARNESS_NAME}.{name}")


def require(*modules: str) -> None:
    """Skip (asv shows n/a) on commits that predate what a benchmark measures."""
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise NotImplementedError(f"{module} does not exist at this commit")


_MEMO: dict[Hashable, Any] = {}


def memo(key: Hashable, build: Callable[[], Any]) -> Any:
    """Build once per process. asv re-runs `setup` before every timed call; states that a run
    does not consume (steady-state decoding, a hash input, a loaded engine) are kept here so
    that re-running `setup` is cheap."""
    if key not in _MEMO:
        _MEMO[key] = build()
    return _MEMO[key]
