"""Mooncake (FAST'25) traces: JSONL rows of timestamp, lengths and prompt block hash ids.

Each row is ``{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}``
where every hash id stands for 512 prompt tokens (the last one for the remainder) and equal
ids mean equal content. The replay turns hash id ``h`` into the prompt segment
``mooncake/h``: 512 token ids fixed by ``h`` alone (see `workloads.prompts`), cut short for the
last block. So equal ids give equal tokens, and because 512-token boundaries are block
boundaries for any block size dividing 512, a prefix hit in the trace is a prefix-cache hit in
the engine. `sharing_from_hash_ids` computes the prefix-sharing ratio straight from the ids,
which must (and in the tests does) equal the ratio measured on the expanded tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workloads.errors import WorkloadError, from_validation_error
from workloads.jsonl import parse_object, read_lines
from workloads.model import Segment, Workload
from workloads.stats import Sharing
from workloads.traces.replay import ReplayOptions, TraceRequest, build_replay, select

TOKENS_PER_HASH_ID = 512
SEGMENT_PREFIX = "mooncake/"


class MooncakeRow(BaseModel):
    """One trace row. Unknown extra fields are ignored: other Mooncake traces may add some."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    timestamp: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    input_length: Annotated[int, Field(ge=1)]
    output_length: Annotated[int, Field(ge=0)]
    hash_ids: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


def read_rows(path: Path) -> Iterator[tuple[int, MooncakeRow]]:
    """(line number, row) for every row, each checked as it is read."""
    for number, text in read_lines(path):
        data = parse_object(text, path, number)
        try:
            row = MooncakeRow.model_validate(data)
        except ValidationError as err:
            raise from_validation_error(err, path, number) from None
        blocks = -(-row.input_length // TOKENS_PER_HASH_ID)
        if len(row.hash_ids) != blocks:
            problem = (
                f"has {len(row.hash_ids)} ids but input_length {row.input_length} needs "
                f"{blocks} (one per {TOKENS_PER_HASH_ID} tokens)"
            )
            raise WorkloadError(path, number, "hash_ids", problem)
        yield number, row


def segments_of(row: MooncakeRow, pool: dict[int, Segment]) -> tuple[Segment, ...]:
    """The prompt segments of `row`; `pool` shares full-block segments between rows."""
    full = []
    for h in row.hash_ids[:-1]:
        segment = pool.get(h)
        if segment is None:
            segment = pool[h] = Segment(f"{SEGMENT_PREFIX}{h}", TOKENS_PER_HASH_ID)
        full.append(segment)
    tail = row.input_length - TOKENS_PER_HASH_ID * (len(row.hash_ids) - 1)
    return (*full, Segment(f"{SEGMENT_PREFIX}{row.hash_ids[-1]}", tail))


def selected_rows(path: str | Path, options: ReplayOptions) -> list[tuple[int, MooncakeRow]]:
    options.check()
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(path, None, None, "no such file")
    rows = list(select(read_rows(path), options))
    if not rows:
        raise WorkloadError(path, 1, None, "the trace has no rows")
    return rows


def replay(path: str | Path, options: ReplayOptions | None = None) -> Workload:
    """The workload that replays the Mooncake trace at `path`."""
    options = options or ReplayOptions()
    path = Path(path)
    pool: dict[int, Segment] = {}
    requests = [
        TraceRequest(
            line, row.timestamp, segments_of(row, pool), row.input_length, row.output_length
        )
        for line, row in selected_rows(path, options)
    ]
    description = f"Mooncake trace replay of {path.name}"
    return build_replay(requests, options, "mooncake", path.stem, description)


def sharing_from_hash_ids(rows: Iterable[MooncakeRow], block_size: int) -> Sharing:
    """Prefix sharing at `block_size` computed from hash ids alone, in row (arrival) order.

    Counts full blocks only, as prefix caching does. A block is "seen before" when an earlier
    row had the same chain of hash ids up to and including its 512-token unit, and covered at
    least the same tokens of that unit (the last unit of a row may be partial).
    """
    if TOKENS_PER_HASH_ID % block_size:
        raise ValueError(f"block size {block_size} does not divide {TOKENS_PER_HASH_ID}")
    nodes: dict[tuple[int, int], int] = {}
    covered: dict[int, int] = {}
    seen = total = 0
    for row in rows:
        parent = -1
        left = row.input_length
        updates: list[tuple[int, int]] = []
        for h in row.hash_ids:
            node = nodes.setdefault((parent, h), len(nodes))
            blocks = min(left, TOKENS_PER_HASH_ID) // block_size
            left -= TOKENS_PER_HASH_ID
            total += blocks
            seen += min(blocks, covered.get(node, 0))
            updates.append((node, blocks))
            parent = node
        for node, blocks in updates:
            if blocks > covered.get(node, 0):
                covered[node] = blocks
    return Sharing(seen, total)
