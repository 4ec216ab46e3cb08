"""What one run reached: the branches of the twin and of upstream it executed, and its activity.

The fitness of guided generation is novelty: a workload that executes an arc (a `from -> to`
line pair, coverage.py's branch measure) no earlier run executed, on either side, reached a
state the corpus lacks. Arcs come from coverage.py's C tracer over the twin's `impl/` and
upstream's measured directories (`conformance.coverage.targets`, directories never module
names: those make coverage import vllm twice). Only systems running in this process are seen:
upstream 0.32.0 (in process) and the pure-Python twin; a release in its own worker process
(0.33.0) and the compiled twin run untraced, so the probe refuses them (`traced_spec`).

AFL counts hits in buckets as well as edges; coverage.py has no counts, so the run's
`Activity` stands in: each counter's log2 bucket (1, 2-3, 4-7, ...) is a feature too, so a run
that preempts eight times is new after runs that preempted once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TypeVar

from conformance.paths import REPO_ROOT
from conformance.sched.activity import Activity
from vtwin.errors import UserError

T = TypeVar("T")
Feature = tuple[str, str, int, int]
"""(side, file, from line, to line): side "twin" or "upstream"; activity features are
("activity", counter name, bucket, 0)."""
TWIN = "twin"
UPSTREAM = "upstream"
ACTIVITY = "activity"


def traced_spec(spec: str) -> str:
    """`spec` when its system runs traceable in this process; one UserError line otherwise."""
    from conformance.systems.specs import parse_spec

    parsed = parse_spec(spec)
    if parsed.out_of_process:
        raise UserError(f"guided generation traces systems in this process; {spec} runs in a "
                        "worker process (compare against `upstream`, the in-process 0.32.0 "
                        "oracle, or a `+sched=` plugin on it)")
    if parsed.kind == "impl" and os.environ.get("VTWIN_COMPILED") == "1":
        raise UserError("guided generation traces the pure-Python twin: unset VTWIN_COMPILED "
                        "(the compiled twin's modules are not Python coverage.py can trace)")
    return spec


def bucket(count: int) -> int:
    """0 for 0, else 1 + floor(log2(count)): 1, 2-3, 4-7, 8-15, ..."""
    return count.bit_length()


def activity_features(activity: Activity) -> frozenset[Feature]:
    return frozenset((ACTIVITY, f.name, bucket(int(getattr(activity, f.name))), 0)
                     for f in fields(activity) if getattr(activity, f.name))


@dataclass(slots=True)
class ArcProbe:
    """coverage.py over the twin and upstream, started and stopped around each run."""

    twin_dir: Path
    upstream_root: Path | None
    """The installed `vllm` package (None: upstream is not traced)."""

    @staticmethod
    def here(upstream: bool = True) -> ArcProbe:
        """The twin's package in this checkout, and the installed upstream (when `upstream`
        and vLLM is installed)."""
        root = None
        if upstream:
            from conformance.coverage.targets import vllm_dir
            try:
                root = vllm_dir()
            except UserError:
                root = None
        return ArcProbe((REPO_ROOT / "impl").resolve(), root)

    def sources(self) -> list[str]:
        from conformance.coverage.targets import source_dirs
        upstream = source_dirs(self.upstream_root) if self.upstream_root is not None else []
        return [str(self.twin_dir), *upstream]

    def run(self, action: Callable[[], T]) -> tuple[T, frozenset[Feature]]:
        """`action()` traced, and the arcs it executed."""
        import coverage

        if coverage.Coverage.current() is not None:
            raise UserError("guided generation measures arcs with coverage.py itself, so it "
                            "cannot run under another coverage measurement")
        cov = coverage.Coverage(data_file=None, branch=True, source=self.sources(),
                                config_file=False)
        cov.start()
        try:
            result = action()
        finally:
            cov.stop()
        data = cov.get_data()
        return result, frozenset(self._features(data.measured_files(), data.arcs))

    def _features(self, files: Iterable[str],
                  arcs_of: Callable[[str], list[tuple[int, int]] | None]) -> Iterable[Feature]:
        for path in files:
            file = Path(path)
            if file.is_relative_to(self.twin_dir):
                side, name = TWIN, "impl/" + file.relative_to(self.twin_dir).as_posix()
            elif self.upstream_root is not None and file.is_relative_to(self.upstream_root):
                side = UPSTREAM
                name = "vllm/" + file.relative_to(self.upstream_root).as_posix()
            else:
                continue
            for start, end in arcs_of(path) or ():
                yield side, name, start, end
