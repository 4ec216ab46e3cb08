"""Starting systems before the first workload, and keeping upstream's logs off the console.

`start_systems` builds (and closes) one system per factory before any workload runs, so no
workload's time includes importing torch and vLLM or starting a worker; `upstream_logs` sends
upstream's log records and Python warnings to a file and counts them. Both serve `vtwin conform`,
`vtwin drift` and the release matrix."""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from conformance.systems.protocol import SystemFactory, close_system
from conformance.systems.registry import build_reason
from workloads.model import EngineConfig

UPSTREAM_LOGGERS = ("vllm", "torch", "triton")


class _Counting(logging.Handler):
    def __init__(self, counts: Counter[str]) -> None:
        super().__init__(logging.DEBUG)
        self.counts = counts

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname.lower()] += 1


@contextmanager
def upstream_logs(path: Path | None) -> Iterator[Counter[str]]:
    """Send the loggers of vllm / torch / triton and all Python warnings to `path` (None: leave
    them alone) and count them. vLLM's own console handler is switched off through
    VLLM_CONFIGURE_LOGGING when vllm is not imported yet, and detached for the duration when it
    is (a test process that imported it earlier); everything is put back afterwards."""
    import os

    counts: Counter[str] = Counter()
    if path is None:
        yield counts
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    to_file = logging.FileHandler(path, encoding="utf-8", delay=True)
    to_file.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handlers: list[logging.Handler] = [to_file, _Counting(counts)]
    saved: list[tuple[logging.Logger, list[logging.Handler], bool, int]] = []
    for name in UPSTREAM_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, list(logger.handlers), logger.propagate, logger.level))
        logger.handlers = list(handlers)
        logger.propagate = False
        # Always the capture's level (restored afterwards): a level left on these loggers by
        # earlier code in the process (vllm's own logging config, a test) would drop records.
        logger.setLevel(os.environ.get("VLLM_LOGGING_LEVEL", "WARNING").upper())

    def to_log(message: Warning | str, category: type[Warning], filename: str, lineno: int,
               file: Any = None, line: str | None = None) -> None:
        counts["warning"] += 1
        with path.open("a", encoding="utf-8") as handle:
            handle.write(warnings.formatwarning(message, category, filename, lineno, line))

    disabled_below = logging.root.manager.disable  # a process-wide logging.disable(...)
    logging.disable(logging.NOTSET)
    with warnings.catch_warnings():
        # Every emission counts: under the default "once per location" rule a warning seen
        # before this run (an earlier run in the same process) would vanish from the log.
        warnings.simplefilter("always")
        warnings.showwarning = to_log
        try:
            yield counts
        finally:
            for logger, old, propagate, level in saved:
                logger.handlers, logger.propagate = old, propagate
                logger.setLevel(level)
            logging.disable(disabled_below)
            to_file.close()


def start_systems(factories: Sequence[tuple[str, SystemFactory]], config: EngineConfig,
                  out: TextIO, prefix: str = "vtwin conform") -> dict[str, float]:
    """Start every system before the first workload, so no workload's time includes it: build
    one system per factory for `config` and close it at once (in process, the first upstream
    build imports torch and vLLM; a worker factory starts its worker, which imports them
    there). The systems start side by side, one thread each: a worker imports in its own
    process, so two releases (drift) or a worker beside an in-process upstream take as long as
    the slower one, not the sum. Returns seconds per spec, each also printed on a line of its
    own. A build that fails here is only noted: the first workload that builds one reports it
    in full."""
    from concurrent.futures import ThreadPoolExecutor

    def start(spec: str, factory: SystemFactory) -> tuple[str, float]:
        started = time.monotonic()
        try:
            close_system(factory(config))
            note = "ready"
        except Exception as err:  # the workloads it cannot be built for say so, each
            note = f"could not be built for the first workload: {build_reason(err)}"
        return note, time.monotonic() - started

    def say(spec: str, note: str, took: float) -> None:
        seconds[spec] = took
        print(f"{prefix}: start-up of {spec}: {note} in {took:.2f}s", file=out, flush=True)

    seconds: dict[str, float] = {}
    for spec, _ in factories:
        print(f"{prefix}: starting {spec} ...", file=out, flush=True)
    # Workers start in threads (they wait on a pipe); in-process systems in this thread, as
    # importing vLLM may install signal handlers, which only the main thread can.
    remote = [(spec, f) for spec, f in factories if _out_of_process(spec)]
    local = [(spec, f) for spec, f in factories if not _out_of_process(spec)]
    with ThreadPoolExecutor(max_workers=max(1, len(remote))) as pool:
        futures = [(spec, pool.submit(start, spec, factory)) for spec, factory in remote]
        for spec, factory in local:
            say(spec, *start(spec, factory))
        for spec, future in futures:
            say(spec, *future.result())
    return seconds


def _out_of_process(spec: str) -> bool:
    from conformance.systems.specs import parse_spec

    try:
        return parse_spec(spec).out_of_process
    except Exception:
        return False


def upstream_log_path(command: str) -> Path:
    """Where a command without a report directory sends upstream's log records."""
    return Path(tempfile.gettempdir()) / f"vtwin-{command}-upstream.log"


def log_counts(counts: dict[str, int]) -> str:
    """`1 error, 3 warnings`: upstream's records by level (upstream logs a planned load
    failure as an error: that one is expected, not a fault of the run)."""
    return ", ".join(f"{n} {level}{'s' if n != 1 else ''}" for level, n in sorted(counts.items()))
