"""Reading workload files: JSON Lines in, a validated `Workload` with expanded prompts out.

Reading is one pass: parse each line, check its header or record schema, keep its line number,
then hand everything to `workloads.checks` for the rules that span records. The first problem
stops the load with a `WorkloadError` naming file, line and field.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from workloads.checks import build_workload
from workloads.errors import WorkloadError, from_validation_error
from workloads.jsonl import parse_object, read_lines, split_lines
from workloads.located import Located
from workloads.model import Workload
from workloads.schema import (
    FORMAT_NAME,
    FORMAT_VERSION,
    RECORD_TYPES,
    AbortModel,
    ControlModel,
    HeaderModel,
    PlanModel,
    RequestModel,
)


def load_file(path: str | Path) -> Workload:
    """Load and validate the workload file at `path`."""
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(path, None, None, "no such file")
    return _load(read_lines(path), str(path))


def loads(text: str, source: str = "<string>") -> Workload:
    """Load a workload from the text of a file; `source` names it in error messages."""
    return _load(split_lines(text), source)


def _load(lines: Iterable[tuple[int, str]], source: str) -> Workload:
    header: Located[HeaderModel] | None = None
    requests: list[Located[RequestModel]] = []
    aborts: list[Located[AbortModel]] = []
    plans: list[Located[PlanModel]] = []
    controls: list[Located[ControlModel]] = []
    for number, text in lines:
        data = parse_object(text, source, number)
        if header is None:
            header = Located(number, _header(data, source, number))
            continue
        kind = _record_type(data, source, number)
        try:
            if kind == "request":
                requests.append(Located(number, RequestModel.model_validate(data)))
            elif kind == "abort":
                aborts.append(Located(number, AbortModel.model_validate(data)))
            elif kind == "control":
                controls.append(Located(number, ControlModel.model_validate(data)))
            else:
                plans.append(Located(number, PlanModel.model_validate(data)))
        except ValidationError as err:
            raise from_validation_error(err, source, number) from None
    if header is None:
        raise WorkloadError(source, 1, "type", "missing header: the file has no records")
    return build_workload(source, header, requests, aborts, plans, controls)


def _header(data: dict[str, Any], source: str, line: int) -> HeaderModel:
    """Check the header, looking at format and version before anything else.

    A file from a newer vtwin should say "unsupported version", not complain about the new
    fields it uses, so those two are checked first.
    """
    kind = data.get("type")
    if kind != "header":
        problem = f"missing header: the first record must have type 'header', got {kind!r}"
        raise WorkloadError(source, line, "type", problem)
    fmt = data.get("format")
    if fmt != FORMAT_NAME:
        problem = f"not a vtwin workload: expected {FORMAT_NAME!r}, got {fmt!r}"
        raise WorkloadError(source, line, "format", problem)
    version = data.get("version")
    if type(version) is not int or version != FORMAT_VERSION:
        problem = f"unsupported format version {version!r} (this vtwin reads {FORMAT_VERSION})"
        raise WorkloadError(source, line, "version", problem)
    try:
        return HeaderModel.model_validate(data)
    except ValidationError as err:
        raise from_validation_error(err, source, line) from None


def _record_type(data: dict[str, Any], source: str, line: int) -> str:
    kind = data.get("type")
    if kind == "header":
        raise WorkloadError(
            source, line, "type", "a second header; only the first record may be a header"
        )
    if kind not in RECORD_TYPES:
        if "type" not in data:
            raise WorkloadError(source, line, "type", "required field is missing")
        expected = ", ".join(repr(t) for t in RECORD_TYPES)
        problem = f"unknown record type {kind!r} (expected one of {expected})"
        raise WorkloadError(source, line, "type", problem)
    return str(kind)
