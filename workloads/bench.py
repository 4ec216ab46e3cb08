"""Print how long loading the bundled traces takes: ``python -m workloads.bench``.

The requirement is that loading the whole bundled Mooncake trace (3993 requests, ~61M prompt
tokens) stays under 5 s. It is measured here, not asserted in a test, because timings depend on
the machine. Each case runs in a fresh process state-wise (a new TokenSource per load).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from workloads.loader import load_file
from workloads.model import Workload
from workloads.registry import load
from workloads.writer import dump


def _timed(label: str, make: Callable[[], Workload]) -> Workload:
    start = time.perf_counter()
    workload = make()
    seconds = time.perf_counter() - start
    tokens = sum(r.prompt_len for r in workload.requests)
    print(f"{label:<40} {seconds:6.2f} s  {len(workload.requests):6d} requests  {tokens} tokens")
    return workload


def main() -> int:
    names = sys.argv[1:] or ["mooncake-full", "azure-full"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            workload = _timed(f"replay bundled trace {name!r}", partial(load, name))
            path = Path(tmp) / f"{name}.jsonl"
            dump(workload, path)
            del workload
            _timed(f"load workload file of {name!r}", partial(load_file, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
