"""The feature map: which feature a missed region of upstream belongs to.

`conformance/coverage_features.toml` names, per upstream file, the functions (qualified:
`Scheduler.method`) or line ranges of a feature and why the gate does not reach it:

```toml
[[feature]]
name = "multimodal encoder inputs"
reason = "the request surface: no workload carries multimodal inputs yet (issue 30)"
file = "vllm/v1/core/sched/scheduler.py"
functions = ["Scheduler._try_schedule_encoder_inputs"]
lines = [[120, 140]]            # optional: line ranges, of one release
release = "0.32.0"              # required with lines
```

Functions are matched by name, not line numbers, so the map survives upstream moving code
around; a missed line in no named function or range is `unmapped`, listed with its function,
which is how a new release's new code shows up by itself.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from vtwin.errors import UserError

MODULE = "<module>"


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    reason: str
    file: str
    functions: frozenset[str] = frozenset()
    lines: tuple[tuple[int, int], ...] = ()
    release: str | None = None
    """The release the entry's line ranges are for (None: any; functions match any release)."""

    def applies_to(self, release: str) -> bool:
        return self.release is None or self.release == release

    def for_release(self, release: str) -> Feature | None:
        """The entry as it applies to `release`: whole; its functions alone when its line
        ranges are another release's (functions match any release); or nothing."""
        if self.applies_to(release):
            return self
        return replace(self, lines=(), release=None) if self.functions else None

    def owns(self, file: str, function: str, line: int) -> bool:
        return file == self.file and (function in self.functions or any(
            lo <= line <= hi for lo, hi in self.lines))


@dataclass(slots=True)
class Region:
    """Missed lines of one function of one file."""

    file: str
    function: str
    lines: list[int] = field(default_factory=list)

    @property
    def span(self) -> str:
        return f"{min(self.lines)}-{max(self.lines)}" if self.lines else "-"


def load_features(path: Path) -> tuple[Feature, ...]:
    """The map; a malformed entry is one line naming the file, the entry and the field."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"{path}: {err}") from None
    features = []
    for index, entry in enumerate(data.get("feature", []), 1):
        for key in ("name", "reason", "file"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise UserError(f"{path}: feature #{index}: field {key!r} must be a non-empty "
                                "string")
        ranges = entry.get("lines", [])
        if not all(isinstance(r, list) and len(r) == 2 and r[0] <= r[1] for r in ranges):
            raise UserError(f"{path}: feature #{index} ({entry['name']}): lines must be "
                            "[[first, last], ...]")
        release = entry.get("release")
        if ranges and not isinstance(release, str):
            raise UserError(f"{path}: feature #{index} ({entry['name']}): line ranges need "
                            "the release they are for (release = \"X.Y.Z\")")
        features.append(Feature(entry["name"], entry["reason"], entry["file"],
                                frozenset(entry.get("functions", [])),
                                tuple((int(a), int(b)) for a, b in ranges), release))
    return tuple(features)


def function_spans(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line, last line) of every function and method, outermost
    first, so the innermost that holds a line is the last match."""
    spans: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                spans.append((f"{prefix}{child.name}", first, child.end_lineno or first))
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(source), "")
    return spans


def regions(file: str, source: str, missed: Iterable[int]) -> list[Region]:
    """The missed lines of one file, grouped by the innermost function that holds each."""
    spans = function_spans(source)
    by_function: dict[str, Region] = {}
    for line in sorted(missed):
        holder = MODULE
        for name, first, last in spans:
            if first <= line <= last:
                holder = name
        by_function.setdefault(holder, Region(file, holder)).lines.append(line)
    return list(by_function.values())


def classify(found: Iterable[Region], features: Iterable[Feature]
             ) -> tuple[dict[str, list[Region]], list[Region]]:
    """Regions by feature name, and the unmapped ones (a region some of whose lines no
    feature owns is split: the owned lines go to their feature)."""
    features = tuple(features)
    mapped: dict[str, list[Region]] = {}
    unmapped: list[Region] = []
    for region in found:
        rest = Region(region.file, region.function)
        for line in region.lines:
            owner = next((f for f in features if f.owns(region.file, region.function, line)),
                         None)
            if owner is None:
                rest.lines.append(line)
                continue
            bucket = mapped.setdefault(owner.name, [])
            if not bucket or (bucket[-1].file, bucket[-1].function) != (region.file,
                                                                         region.function):
                bucket.append(Region(region.file, region.function))
            bucket[-1].lines.append(line)
        if rest.lines:
            unmapped.append(rest)
    return mapped, unmapped
