"""`run_quick`: every quick-pass case, one after another, each interleaved across systems."""

from __future__ import annotations

import fnmatch
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .cases import quick_cases
from .e2e import e2e_cases, engine_missing
from .measure import Case, Result, run_case

ORACLE_ENV: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "OMP_NUM_THREADS": "1",
    "VLLM_LOGGING_LEVEL": "ERROR",
    "TOKENIZERS_PARALLELISM": "false",
}
"""Settings upstream needs in-process and offline; applied (as defaults) before it is imported."""


def apply_oracle_env() -> None:
    """Also quiet upstream's "vllm" logger: its warnings (CPU block sizes, Triton) would
    interleave with the table, and VLLM_LOGGING_LEVEL alone does not reach them here."""
    for key, value in ORACLE_ENV.items():
        os.environ.setdefault(key, value)
    logging.getLogger("vllm").setLevel(logging.ERROR)


def upstream_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def all_cases() -> tuple[list[Case], list[str]]:
    """The quick pass's cases, and a line for each measurement that cannot run here."""
    left_out: list[str] = []
    cases = quick_cases()
    missing = engine_missing()
    if missing:
        left_out.append(f"engine end to end: {missing}")
    else:
        cases += e2e_cases()
    return cases, left_out


def select(cases: Sequence[Case], patterns: Sequence[str]) -> list[Case]:
    """Cases whose name matches any glob (or contains any plain string) in `patterns`."""
    if not patterns:
        return list(cases)
    return [c for c in cases if any(fnmatch.fnmatchcase(c.name, p) or p in c.name
                                    for p in patterns)]


@dataclass(slots=True)
class QuickRun:
    results: list[Result] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_quick(patterns: Sequence[str] = (), rounds: int = 5,
              progress: Callable[[str], None] | None = None) -> QuickRun:
    apply_oracle_env()
    cases, left_out = all_cases()
    run = QuickRun(left_out=left_out)
    start = time.perf_counter()
    for case in select(cases, patterns):
        try:
            run.results.append(run_case(case, rounds, progress=progress))
        except Exception as err:  # one broken case must not hide the others' numbers
            line = f"{case.name}: failed ({type(err).__name__}: {err})"
            run.left_out.append(line)
            if progress is not None:
                progress(line)
    run.seconds = time.perf_counter() - start
    return run


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
