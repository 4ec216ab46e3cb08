"""Azure LLM inference traces (2023/2024): CSV rows of timestamp, context and output lengths.

The header row must name ``TIMESTAMP``, ``ContextTokens`` and ``GeneratedTokens`` (other
columns are ignored). Timestamps look like ``2023-11-16 18:15:46.6805900``: any number of
fraction digits (beyond microseconds they are dropped) and an optional UTC offset; times
without an offset are taken as UTC. The trace says nothing about shared content, so every
prompt is unique filler keyed by its request id.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from workloads.errors import WorkloadError
from workloads.model import Workload
from workloads.traces.replay import ReplayOptions, TraceRequest, build_replay, select

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_TIMESTAMP = re.compile(
    r"(?P<base>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<frac>\d+))?"
    r"(?P<tz>Z|[+-]\d{2}:\d{2})?"
)


def parse_timestamp_ms(text: str) -> float:
    """Milliseconds since the Unix epoch; raises ValueError with a short reason."""
    match = _TIMESTAMP.fullmatch(text.strip())
    if match is None:
        raise ValueError("expected a time like '2023-11-16 18:15:46.6805900'")
    frac = (match["frac"] or "")[:6].ljust(6, "0")
    tz = match["tz"] or "+00:00"
    tz = "+00:00" if tz == "Z" else tz
    moment = datetime.fromisoformat(f"{match['base']}.{frac}{tz}")
    return moment.astimezone(UTC).timestamp() * 1000.0


def _decode(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise WorkloadError(path, None, None, f"cannot read file: {err.strerror}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise WorkloadError(path, line, None, "line is not valid UTF-8") from None


def _count(text: str, path: Path, line: int, column: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise WorkloadError(path, line, column, f"expected an integer, got {text!r}") from None
    if value < minimum:
        raise WorkloadError(path, line, column, f"must be >= {minimum}, got {value}")
    return value


def read_rows(path: Path) -> Iterator[TraceRequest]:
    """Every data row as a `TraceRequest`, checked as it is read."""
    reader = csv.reader(io.StringIO(_decode(path), newline=""), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise WorkloadError(path, 1, COLUMNS[0], "missing header row: the file is empty")
        names = [h.strip() for h in header]
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            found = ", ".join(repr(n) for n in names)
            raise WorkloadError(path, 1, missing[0], f"header has no such column (found {found})")
        where = [names.index(c) for c in COLUMNS]
        for row in reader:
            line = reader.line_num
            if not row or not any(cell.strip() for cell in row):
                continue
            if len(row) < len(names):
                absent = names[len(row)]
                problem = f"missing: the row has {len(row)} of {len(names)} columns"
                raise WorkloadError(path, line, absent, problem)
            if len(row) > len(names):
                problem = f"the row has {len(row)} columns but the header names {len(names)}"
                raise WorkloadError(path, line, None, problem)
            stamp, context, generated = (row[i] for i in where)
            try:
                when = parse_timestamp_ms(stamp)
            except ValueError as err:
                raise WorkloadError(path, line, COLUMNS[0], f"{err}, got {stamp!r}") from None
            prompt_len = _count(context, path, line, COLUMNS[1], 1)
            output_len = _count(generated, path, line, COLUMNS[2], 0)
            yield TraceRequest(line, when, (), prompt_len, output_len)
    except csv.Error as err:
        raise WorkloadError(path, reader.line_num, None, f"malformed CSV: {err}") from None


def replay(path: str | Path, options: ReplayOptions | None = None) -> Workload:
    """The workload that replays the Azure trace at `path`."""
    options = options or ReplayOptions()
    options.check()
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(path, None, None, "no such file")
    requests = list(select(read_rows(path), options))
    if not requests:
        raise WorkloadError(path, 2, None, "the trace has no data rows")
    description = f"Azure LLM trace replay of {path.name}"
    return build_replay(requests, options, "azure", path.stem, description)
