"""The default conformance suite: bundled workloads plus the variants none of them covers.

Each behaviour the issue lists is covered by at least one entry (see `COVERS`): FCFS and
priority, prefix caching on and off, chunked prefill with and without a threshold and off,
preemption storms, aborts mid-prefill and mid-decode, EOS / stop / max_tokens / min_tokens,
spec decode sync and async, async scheduling, the three hybrid KV layouts, and the CI-sized
Mooncake and Azure replays. Variants are a bundled workload with `dataclasses.replace` on its
config (or, for aborts, on its abort list), so they stay as small as the workloads they come
from. `integrity_every` spaces out the twin's integrity checks on the big replays, where a
full-pool check every step would dominate the run.

The gate also runs every `*.jsonl` file in `conformance/regressions/` (`gate_workloads`):
shrunk divergent workloads written by `write_regression` (`vtwin conform --emit-regression`,
or a test on failure) stay in the gate forever after, so a fixed divergence cannot come back.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from conformance.paths import REGRESSIONS_DIR
from conformance.sched.compare import Divergence
from conformance.sched.suite_entries import ENTRIES, SuiteEntry
from vtwin.errors import UserError
from workloads import Workload, dump, dumps, list_workloads, load, loads

SUITE: MappingProxyType[str, SuiteEntry] = MappingProxyType({e.name: e for e in ENTRIES})


def suite_names() -> tuple[str, ...]:
    return tuple(SUITE)


def resolve_workload(name_or_path: str) -> tuple[Workload, int]:
    """A suite entry by name, else a bundled workload or a workload file (`workloads.load`).

    Returns the workload and how often to check the twin's integrity (every N steps)."""
    entry = SUITE.get(name_or_path)
    if entry is not None:
        return entry.make(), entry.integrity_every
    try:
        return load(name_or_path), 1
    except UserError as err:
        if name_or_path in list_workloads() or Path(name_or_path).is_file():
            raise  # found and read: the error is about its content, not which one was meant
        raise UserError(f"{err}; suite entries: {', '.join(SUITE)}") from None


def regression_files(directory: Path = REGRESSIONS_DIR) -> tuple[str, ...]:
    """Every regression workload file in `directory`, sorted (none if it does not exist)."""
    return tuple(str(f) for f in sorted(directory.glob("*.jsonl"))) if directory.is_dir() else ()


def gate_workloads(directory: Path = REGRESSIONS_DIR) -> tuple[str, ...]:
    """What `vtwin gate` runs: the default suite, then every regression file."""
    return suite_names() + regression_files(directory)


def _slug(text: str, limit: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-.")[:limit].rstrip("-.") or "x"


def write_regression(workload: Workload, divergence_or_reason: Divergence | str,
                     directory: Path) -> Path:
    """Write `workload` as a standalone regression file in `directory` and return its path.

    The file is named after the workload and what went wrong (``WORKLOAD.FIELD.jsonl`` for a
    divergence, ``WORKLOAD.TAG.jsonl`` for a reason ``"TAG: details"``); the workload inside is
    renamed
    ``regression-WORKLOAD`` so it never collides with the suite entry it came from, and its
    description starts with what diverged (level, step, field) or the reason. The file is read
    back before it is kept: a regression that would not load, or would load as another
    workload, is refused rather than written.
    """
    if isinstance(divergence_or_reason, Divergence):
        d = divergence_or_reason
        what = f"{d.level} divergence at step {d.step}, field {d.field}"
        tag = d.top_field
    else:
        what = " ".join(divergence_or_reason.split())[:200]
        tag = what.split(":", 1)[0]
    name = workload.name if workload.name.startswith("regression-") \
        else f"regression-{workload.name}"
    out = replace(workload, name=name,
                  description=f"regression ({what}); was: {workload.description}")
    try:
        again = loads(dumps(out), source=f"<regression {name}>")
    except UserError as err:
        raise UserError(f"regression {name}: cannot be written as a workload file: {err}") \
            from None
    if (again.config, again.requests, again.aborts, again.plans) != (
            out.config, out.requests, out.aborts, out.plans):
        raise UserError(f"regression {name}: the workload file would not reproduce it "
                        "(prompts expand differently when read back)")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{_slug(workload.name, 60)}.{_slug(tag)}.jsonl"
    dump(out, path)
    return path

